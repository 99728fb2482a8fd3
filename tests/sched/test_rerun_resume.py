"""Reruns into a finished --out: the same runs resume, others are refused without
--force, a folder servecal did not write is never replaced, Ctrl-C keeps every run."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.reports.loading import discover
from servecal.sched.result import RunResult
from servecal.sched.runfolder import is_servecal_run, write_run
from servecal.util.errors import InputError

runner = CliRunner()


def simulate(out: Path, seeds: int, *extra: str):
    args = ["simulate", "--workload", "chat", "--policy", "fixed-256", "--tpot-slo", "50",
            "--seeds", str(seeds), "--requests", "30", "--out", str(out), "--json",
            *extra]  # fmt: skip
    return runner.invoke(app, args)


def invocations(out: Path) -> dict[str, str]:
    return {
        p.parent.name: json.loads(p.read_text())["invocation"]
        for p in sorted(out.glob("seed-*/run.json"))
    }


def read_result(run: Path, plan_calls: int = 1) -> RunResult:
    return RunResult.from_frames(
        requests=pd.read_parquet(run / "requests.parquet"),
        iterations=pd.read_parquet(run / "iterations.parquet"),
        plan_calls=plan_calls,
        energy_source="none",
    )


def one_error_line(output: str) -> str:
    lines = [x for x in output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    return lines[0]


def test_a_rerun_resumes_the_finished_runs_and_adds_new_seeds(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = simulate(out, 2)
    assert first.exit_code == 0, first.output
    written = invocations(out)
    again = simulate(out, 2)
    assert again.exit_code == 0, again.output
    assert invocations(out) == written  # nothing recomputed
    assert json.loads(again.stdout) == json.loads(first.stdout)  # the same means, read back
    more = simulate(out, 3)
    assert more.exit_code == 0, more.output
    now = invocations(out)
    assert {k: now[k] for k in written} == written and now["seed-2"] not in written.values()


def test_a_rerun_of_another_configuration_is_refused_unless_forced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert simulate(out, 2).exit_code == 0
    written = invocations(out)
    r = simulate(out, 2, "--rate", "3")
    line = one_error_line(r.output)
    assert r.exit_code == 2 and "another configuration" in line and "--force" in line
    assert "rate" in line
    assert invocations(out) == written  # refused before anything ran
    forced = simulate(out, 2, "--rate", "3", "--force")
    assert forced.exit_code == 0, forced.output
    assert set(invocations(out).values()).isdisjoint(written.values())
    assert all(
        json.loads((out / f"seed-{k}" / "run.json").read_text())["config"]["rate"] == 3
        for k in (0, 1)
    )


def test_a_seed_folder_servecal_did_not_write_is_never_replaced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    mine = out / "seed-1"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("my measurements")
    for extra in ((), ("--force",)):
        r = simulate(out, 2, *extra)
        assert r.exit_code == 2 and "not written by servecal" in one_error_line(r.output)
        assert (mine / "notes.txt").read_text() == "my measurements"
        assert not (out / "seed-0").exists()  # refused before anything ran
    # a servecal run folder someone added a file to is theirs now
    assert simulate(tmp_path / "b", 1).exit_code == 0
    run = tmp_path / "b" / "seed-0"
    assert is_servecal_run(run)
    (run / "README").write_text("kept")
    assert not is_servecal_run(run)
    result = read_result(run)
    with pytest.raises(InputError, match="not written by servecal"):
        write_run(run, result, {}, {}, {})
    assert (run / "README").read_text() == "kept"


def test_write_run_replaces_its_own_folder_whole(tmp_path: Path) -> None:
    assert simulate(tmp_path / "o", 1).exit_code == 0
    run = tmp_path / "o" / "seed-0"
    result = read_result(run, plan_calls=7)
    write_run(run, result, {"x": 1}, {"goodput": np.float64(1.5)}, {})
    doc = json.loads((run / "run.json").read_text())
    assert doc["plan_calls"] == 7 and doc["summary"]["goodput"] == 1.5
    assert not [p for p in run.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_rerun_with_max_goodput_replays_the_recorded_searches(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ("--max-goodput", "--rate-range", "1:8:16", "--rate-tol", "0.2")
    first = simulate(out, 2, *args)
    assert first.exit_code == 0, first.output
    written = invocations(out)
    again = simulate(out, 2, *args)
    assert again.exit_code == 0, again.output
    assert invocations(out) == written
    a, b = json.loads(first.stdout), json.loads(again.stdout)
    assert a["max_goodput"] == b["max_goodput"] and a["max_goodput_bound"] == b["max_goodput_bound"]


def test_ctrl_c_during_a_forced_rerun_keeps_every_finished_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    base = [sys.executable, "-m", "servecal", "compare", "--out", str(out), "--workloads",
            "chat", "--policies", "fixed-256,fixed-1024", "--tpot-slo", "50", "--seeds", "3",
            "--jobs", "2"]  # fmt: skip
    first = subprocess.run([*base, "--requests", "300"], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    before = {p.parent for p in out.glob("*/*/*/seed-*/run.json")}
    assert len(before) == 6
    first_ids = {json.loads((p / "run.json").read_text())["invocation"] for p in before}
    proc = subprocess.Popen(
        [*base, "--requests", "6000", "--force"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )

    def rewritten() -> int:
        ids = []
        for p in out.glob("*/*/*/seed-*/run.json"):
            with contextlib.suppress(OSError, ValueError):  # being replaced right now
                ids.append(json.loads(p.read_text())["invocation"])
        return sum(i not in first_ids for i in ids)

    deadline = time.monotonic() + 300
    while not rewritten():
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    log = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, log
    after = {p.parent for p in out.glob("*/*/*/seed-*/run.json")}
    assert after == before  # every run is there: the old one or its replacement, whole
    runs = discover([out]).runs
    assert len(runs) == 6 and all(len(r.iterations) for r in runs)
    assert 0 < rewritten() < 6


def test_a_table_refitted_at_the_same_path_is_another_run(tmp_path: Path) -> None:
    from servecal.sched.experiment.models import DEFAULT_TRUTH

    assert DEFAULT_TRUTH == "device"
    table = Path(__file__).resolve().parents[2] / "sched" / "data" / "device_a100_fitted.json"
    mine = tmp_path / "t.json"
    mine.write_bytes(table.read_bytes())
    out = tmp_path / "out"
    assert simulate(out, 1, "--predictor", str(mine)).exit_code == 0
    assert simulate(out, 1, "--predictor", str(mine)).exit_code == 0  # resumed
    doc = json.loads(mine.read_text())
    doc["created"] = "refitted"  # other bytes, the same path (created is not hashed)
    mine.write_text(json.dumps(doc))
    r = simulate(out, 1, "--predictor", str(mine))
    assert r.exit_code == 2 and "input_sha256" in one_error_line(r.output)


def test_a_fleet_sweep_writes_and_resumes_its_run_folders(tmp_path: Path) -> None:
    """A cluster spec swept into folders records every replica's table by its digest
    (each file once) and resumes; a replica's table refitted at its path is another run."""
    from servecal.sched.cluster import ClusterSpec, ReplicaSpec
    from servecal.sched.experiment.sweep import sweep
    from servecal.sched.policies.registry import PolicySpec

    table = Path(__file__).resolve().parents[2] / "sched" / "data" / "device_a100_fitted.json"
    mine = tmp_path / "t.json"
    mine.write_bytes(table.read_bytes())
    replicas = (ReplicaSpec(PolicySpec("fixed-256"), predictor=str(mine)),) * 2
    spec = ClusterSpec("chat", replicas, PolicySpec("round-robin"), tpot_slo_ms=50, rate=10,
                       n_requests=30)  # fmt: skip
    out = tmp_path / "fleet"
    first = sweep([spec], folders=[out])[0].summaries[0]
    config = json.loads((out / "seed-0" / "run.json").read_text())["config"]
    assert list(config["input_sha256"]) == [str(mine)]
    assert sweep([spec], folders=[out])[0].summaries[0]["goodput"] == first["goodput"]
    doc = json.loads(mine.read_text())
    doc["created"] = "refitted"
    mine.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="input_sha256"):
        sweep([spec], folders=[out])
