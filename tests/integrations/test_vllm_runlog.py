"""The plug-in's run log on its own (no vLLM): append-only segments, bounded memory,
what a hard stop keeps, and the readers (``validate``, ``report``) on a folder of parts."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from servecal.costmodels.segments import parts, read_table
from servecal.integrations.vllm import runlog
from servecal.integrations.vllm.runlog import RunLog

sys.path.insert(0, str(Path(__file__).parents[1] / "costmodels"))
from tablefactory import small_table  # noqa: E402

CONFIG = {"policy": "sloweave-vllm", "workload": "vllm", "executor": "vllm", "tpot_slo_ms": 25.0}


def step_row(start: float, ms: float, n: int, chunk: int) -> list[float]:
    return [start, ms, n, chunk, 1 if chunk else 0, 100.0, 0.0, 5.0, 20.0, chunk, n + chunk, ms]


def make_log(folder: Path, **kwargs) -> RunLog:
    return RunLog(folder, small_table(), dict(CONFIG), **kwargs)


def drive(log: RunLog, steps: int, requests_every: int = 10, start: float = 0.0) -> float:
    """``steps`` steps; a request arrives, prefills in one step, decodes 4 tokens, leaves."""
    now = start
    live: list[tuple[str, int]] = []
    for k in range(steps):
        if k % requests_every == 0:
            rid = f"r{start:g}-{k}"
            log.arrived(rid, now, 64, 5, 500.0, 25.0)
            chunk = 64
        else:
            rid, chunk = None, 0
        index = log.step(step_row(now, 2.0, len(live), chunk))
        now += 2.5
        if rid is not None:
            log.started(rid, index)
            live.append((rid, index))
        for r, first in list(live):
            if index - first >= 4:
                log.finished(r, now, index, 5)
                live.remove((r, first))
    return now


def test_parts_come_back_in_order_one_row_per_step(tmp_path: Path) -> None:
    log = make_log(tmp_path / "run", flush_every=97, flush_s=3600)
    now = 0.0
    for _ in range(10):  # each block is on disk before the next starts: >= 10 parts
        now = drive(log, 100, start=now)
        log.flush()
    log.close()
    it = read_table(tmp_path / "run" / "iterations.parquet")
    assert it["step"].tolist() == list(range(1000))  # none lost, none twice
    assert len(parts(tmp_path / "run" / "iterations.parquet")) >= 10
    assert (it["chunk"] > 0).sum() == 100
    rq = read_table(tmp_path / "run" / "requests.parquet")
    assert len(rq) == 100 and rq["request_id"].is_unique
    # every request had 5 tokens, 2.5 ms apart: its TPOT is the step spacing
    done = rq[rq["tokens_out"] == 5]
    assert len(done) >= 98
    np.testing.assert_allclose(done["tpot_p99_ms"], 2.5)
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["log"]["closed"] and meta["log"]["steps"] == 1000


def test_a_request_spanning_many_flushes_keeps_its_token_times(tmp_path: Path) -> None:
    log = make_log(tmp_path / "run", flush_every=10, flush_s=3600)
    log.arrived("long", 0.0, 32, 500, 500.0, 25.0)
    log.started("long", log.step(step_row(0.0, 1.0, 0, 32)))
    for k in range(1, 300):  # 30 flushes while it decodes
        log.step(step_row(k * 3.0, 1.0, 1, 0))
    log.finished("long", 900.0, log.steps - 1, 300)
    log.close()
    rq = read_table(tmp_path / "run" / "requests.parquet")
    (row,) = rq.itertuples()
    assert row.tokens_out == 300
    assert row.first_token_ms == pytest.approx(1.0)
    assert row.tpot_p99_ms == pytest.approx(3.0)


def test_memory_is_bounded_by_what_running_requests_need(tmp_path: Path) -> None:
    log = make_log(tmp_path / "run", flush_every=500, flush_s=3600)
    drive(log, 3 * runlog._TRIM_AT + 1000)
    log.flush()
    # short requests: only the step end times since the oldest running request are kept
    assert len(log._ends) < runlog._TRIM_AT + 1000
    assert log.steps == 3 * runlog._TRIM_AT + 1000
    log.close()
    it = read_table(tmp_path / "run" / "iterations.parquet")
    assert it["step"].tolist() == list(range(log.steps))


def test_it_flushes_on_time_alone_while_the_server_is_idle(tmp_path: Path) -> None:
    log = make_log(tmp_path / "run", flush_every=10**9, flush_s=0.2)
    drive(log, 30)
    deadline = time.monotonic() + 30  # a bound on the wait, not a timing assertion
    while not parts(tmp_path / "run" / "iterations.parquet") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert read_table(tmp_path / "run" / "iterations.parquet")["step"].tolist() == list(range(30))
    log.close()


CHILD = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {factory!r})
    from tablefactory import small_table
    from servecal.integrations.vllm.runlog import RunLog
    sys.path.insert(0, {here!r})
    from test_vllm_runlog import CONFIG, drive
    log = RunLog({folder!r}, small_table(), dict(CONFIG), flush_every=10**9, flush_s=0.3)
    drive(log, 400)
    print("logged", log.steps, flush=True)
    time.sleep(1.5)  # five flush intervals: everything above is older than one
    print("ready", flush=True)
    drive(log, 50, start=10**6)  # still running when it is killed
    time.sleep(600)
    """
)


def test_sigkill_loses_nothing_older_than_one_flush_interval(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    code = CHILD.format(
        factory=str(Path(__file__).parents[1] / "costmodels"),
        here=str(Path(__file__).parent),
        folder=str(folder),
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().split() == ["logged", "400"]
        assert child.stdout.readline().strip() == "ready"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
    it = read_table(folder / "iterations.parquet")
    assert it["step"].tolist()[:400] == list(range(400))
    rq = read_table(folder / "requests.parquet")
    assert len(rq) >= 39  # the 40 requests of the first 400 steps, less one still decoding
    assert not json.loads((folder / "run.json").read_text())["log"]["closed"]


KILLED_BEFORE_ANY_FLUSH = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {factory!r})
    from tablefactory import small_table
    from servecal.integrations.vllm.runlog import RunLog
    sys.path.insert(0, {here!r})
    from test_vllm_runlog import CONFIG, drive
    log = RunLog({folder!r}, small_table(), dict(CONFIG), flush_every=10**9, flush_s=3600)
    drive(log, {steps})
    print("logged", log.steps, flush=True)
    import time; time.sleep(600)
    """
)


def test_sigkill_before_the_first_flush_keeps_every_step_and_request(tmp_path: Path) -> None:
    """No part is ever written (the flush interval is an hour): the tail alone holds
    the run, row for row what a closed log writes, predictions and joules aside."""
    folder = tmp_path / "run"
    code = KILLED_BEFORE_ANY_FLUSH.format(
        factory=str(Path(__file__).parents[1] / "costmodels"),
        here=str(Path(__file__).parent),
        folder=str(folder),
        steps=400,
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().split() == ["logged", "400"]
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
    assert not parts(folder / "iterations.parquet")
    it = read_table(folder / "iterations.parquet")
    rq = read_table(folder / "requests.parquet")
    closed = make_log(tmp_path / "closed", flush_every=10**9, flush_s=3600)
    drive(closed, 400)
    closed.close()
    want_it = read_table(tmp_path / "closed" / "iterations.parquet")
    want_rq = read_table(tmp_path / "closed" / "requests.parquet")
    assert it["step"].tolist() == list(range(400))
    for name in runlog.STEP_FIELDS:
        np.testing.assert_array_equal(it[name].to_numpy(), want_it[name].to_numpy(), name)
        assert it[name].dtype == want_it[name].dtype, name
    finished = want_rq[want_rq["completion_ms"].notna()].reset_index(drop=True)
    assert len(rq) == len(finished) == 40
    for name in finished.columns:
        np.testing.assert_array_equal(rq[name].to_numpy(), finished[name].to_numpy(), name)
    # validate and report read such a folder (its steps have no predictions: NaN)
    from typer.testing import CliRunner

    from servecal.cli import app

    table = tmp_path / "table.json"
    small_table().save(table)
    runner = CliRunner()
    checked = runner.invoke(app, ["validate", str(table), str(folder)])
    assert checked.exit_code in (0, 1, 2) and "Traceback" not in checked.output, checked.output
    report = runner.invoke(app, ["report", str(folder), "--out", str(tmp_path / "rep")])
    assert report.exit_code == 0, report.output


def test_a_stop_between_a_part_and_its_tails_removal_counts_each_row_once(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "run"
    log = make_log(folder, flush_every=10**9, flush_s=3600)
    drive(log, 100)
    saved = {p: p.read_bytes() for p in folder.glob("*.parquet/.tail-*")}
    log.flush()  # the rows go into parts and their tails are removed ...
    for path, data in saved.items():  # ... unless the stop came just before that
        path.write_bytes(data)
    drive(log, 50, start=10**6)
    it = read_table(folder / "iterations.parquet")
    assert it["step"].tolist() == list(range(150))
    rq = read_table(folder / "requests.parquet")
    assert rq["request_id"].is_unique and len(rq) == 10 + 5
    log.close()
    assert not list(folder.glob("*.parquet/.tail-*"))  # a closed folder is parts alone
    assert read_table(folder / "iterations.parquet")["step"].tolist() == list(range(150))


def test_a_tail_that_cannot_write_never_stops_the_serving_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A full disk under the tail: the serving loop's calls return as ever, one warning
    says the tail stopped, and the parts still hold everything at the next flush."""
    log = make_log(tmp_path / "run", flush_every=10**9, flush_s=3600)
    os.close(log._step_tail._fd)  # every later write() fails, as on a full disk
    drive(log, 100)
    assert log._step_tail.error is not None
    with caplog.at_level("WARNING"):
        log.flush()
    assert sum("tail" in r.getMessage() and "stopped" in r.getMessage()
               for r in caplog.records) == 1  # fmt: skip
    log.close()
    assert read_table(tmp_path / "run" / "iterations.parquet")["step"].tolist() == list(range(100))


def test_validate_and_report_read_a_live_folder_of_parts(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from servecal.cli import app

    table = tmp_path / "table.json"
    small_table().save(table)
    log = make_log(tmp_path / "run", flush_every=200, flush_s=3600)
    drive(log, 1000)
    log.flush()  # live: not closed, no summary in run.json
    runner = CliRunner()
    out = runner.invoke(app, ["validate", str(table), str(tmp_path / "run"), "--json"])
    assert out.exit_code in (0, 1, 2), out.output
    assert "Traceback" not in out.output
    report = runner.invoke(app, ["report", str(tmp_path / "run"), "--out", str(tmp_path / "rep")])
    assert report.exit_code == 0, report.output
    assert (tmp_path / "rep" / "index.html").is_file() or any((tmp_path / "rep").glob("*.html"))
    log.close()


def test_an_empty_live_folder_is_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from servecal.cli import app

    table = tmp_path / "table.json"
    small_table().save(table)
    log = make_log(tmp_path / "run", flush_every=200, flush_s=3600)
    out = CliRunner().invoke(app, ["validate", str(table), str(tmp_path / "run")])
    assert out.exit_code == 2 and "no part written yet" in out.output
    log.close()


def test_a_meter_gives_every_step_its_joules_and_names_its_source(tmp_path: Path) -> None:
    from servecal.integrations.vllm.energy import FakeMeter, StepEnergy

    clock = [0.0]
    meter = FakeMeter(200.0, clock=lambda: clock[0])
    log = RunLog(tmp_path / "run", small_table(), dict(CONFIG), flush_every=50, flush_s=3600,
                 energy=StepEnergy(meter, every=8))  # fmt: skip
    for k in range(203):  # 2 ms steps, the fake clock moving with them
        clock[0] += 0.002
        log.step(step_row(k * 2.0, 2.0, 1, 0))
        if k % 60 == 0:
            log.flush()
    log.close()
    it = read_table(tmp_path / "run" / "iterations.parquet")
    assert it["energy_j"].notna().all()
    assert it["energy_j"].sum() == pytest.approx(200.0 * 0.002 * 203)
    assert json.loads((tmp_path / "run" / "run.json").read_text())["energy_source"] == "fake"
    from servecal.reports.loading import load_run

    run = load_run(tmp_path / "run")
    assert run.summary["energy_j"] == pytest.approx(200.0 * 0.002 * 203)


def test_without_a_meter_energy_is_unavailable_not_zero(tmp_path: Path) -> None:
    log = make_log(tmp_path / "run", flush_every=50, flush_s=3600)
    drive(log, 100)
    log.close()
    assert read_table(tmp_path / "run" / "iterations.parquet")["energy_j"].isna().all()
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["energy_source"] == "unavailable"
    from servecal.reports.loading import load_run

    assert load_run(tmp_path / "run").summary["energy_j"] is None or math.isnan(
        load_run(tmp_path / "run").summary["energy_j"]
    )


def test_run_json_records_the_serving_loops_queries_beyond_the_grid(tmp_path: Path) -> None:
    """No silent clamp: the table's clamped queries (the serving loop's, not the log's
    own vectorised predictions) are in run.json per axis, and logged once at close."""
    table = small_table()
    log = RunLog(tmp_path / "run", table, dict(CONFIG))
    table.predict(4, 2000, ctx=100)  # chunk beyond the grid's 1024
    table.predict(40, 10, ctx=100)  # n_decode beyond its 32
    drive(log, 20)
    with pytest.MonkeyPatch.context() as mp:
        seen: list[str] = []
        mp.setattr(runlog.log, "warning", lambda fmt, *a: seen.append(fmt % a))
        log.close()
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    assert doc["beyond_grid"] == {
        "predictions": 2, "n_decode": 1, "ctx": 0, "prefix": 0, "chunk": 1
    }  # fmt: skip
    assert any("2 predictions beyond the table's grid (n_decode 1, chunk 1)" in s for s in seen)
