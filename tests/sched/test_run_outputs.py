"""Output folders: a rerun replaces the last run's seeds, one writer at a time, normal modes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from servecal.cli import app
from servecal.reports.loading import discover
from servecal.sched.runfolder import OUTPUTS_FILE
from servecal.util.folders import LOCK_NAME

runner = CliRunner()


def simulate(out: Path, seeds: int, *extra: str):
    args = ["simulate", "--workload", "chat", "--policy", "fixed-256", "--tpot-slo", "50",
            "--seeds", str(seeds), "--requests", "10", "--out", str(out), *extra]  # fmt: skip
    return runner.invoke(app, args)


def test_a_rerun_replaces_stale_seeds_and_leaves_other_folders(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert simulate(out, 3).exit_code == 0
    (out / "notes").mkdir()
    (out / "notes" / "mine.txt").write_text("kept")
    leftover = out / ".seed-1.x1y2.tmp"  # a writer killed mid-rename left this behind
    leftover.mkdir()
    (leftover / "run.json").write_text("{}")
    runs = {r.path.name for r in discover([out]).runs}
    assert runs == {"seed-0", "seed-1", "seed-2"}  # the temporary is never a run
    r = simulate(out, 2)
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.glob("seed-*")) == ["seed-0", "seed-1"]
    assert not leftover.exists()
    assert (out / "notes" / "mine.txt").read_text() == "kept"
    record = json.loads((out / OUTPUTS_FILE).read_text())
    assert record["paths"] == ["seed-0", "seed-1", "summary.json"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["seeds"] == [0, 1]
    assert not (out / LOCK_NAME).exists()


def test_a_command_refused_for_bad_input_leaves_the_last_runs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert simulate(out, 2).exit_code == 0
    before = sorted(p.name for p in out.iterdir())
    r = simulate(out, 1, "--policy", "nope")
    assert r.exit_code == 2 and "unknown policy" in r.output
    assert sorted(p.name for p in out.iterdir()) == before
    runs = [json.loads((out / f"seed-{k}" / "run.json").read_text()) for k in (0, 1)]
    assert runs[0]["invocation"] == runs[1]["invocation"]  # one command wrote both


def test_a_second_writer_exits_2_naming_the_first(tmp_path: Path) -> None:
    out = tmp_path / "out"
    hold = (
        "import sys, time\nfrom servecal.util.folders import folder_lock\n"
        "with folder_lock(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold, str(out)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"held"
        r = simulate(out, 1)
        assert r.exit_code == 2, r.output
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert len(lines) == 1 and f"pid {holder.pid}" in lines[0]
        assert "another servecal simulate is writing" in lines[0]
    finally:
        holder.kill()
        holder.wait()
    assert not list(out.glob("seed-*"))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (out / LOCK_NAME).write_text(f"{dead.pid}\n")  # stale: its writer is gone
    assert simulate(out, 1).exit_code == 0
    assert (out / "seed-0" / "run.json").is_file()


def test_outputs_get_normal_modes(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        out = tmp_path / "out"
        assert simulate(out, 1).exit_code == 0
        r = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "report")])
        assert r.exit_code == 0, r.output
    finally:
        os.umask(old)

    def mode(p: Path) -> int:
        return stat.S_IMODE(p.stat().st_mode)

    assert mode(out) == mode(out / "seed-0") == mode(tmp_path / "report") == 0o755
    files = [*(out / "seed-0").iterdir(), out / "summary.json", *(tmp_path / "report").iterdir()]
    assert {mode(f) for f in files} == {0o644}


def test_ctrl_c_during_compare_exits_130_keeping_finished_runs(tmp_path: Path) -> None:
    import signal
    import time

    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "servecal", "compare", "--out", str(out), "--workloads",
           "chat,mixed", "--policies", "fixed-256,sloweave", "--tpot-slo", "25,50", "--seeds",
           "5", "--requests", "8000", "--jobs", "2"]  # fmt: skip
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # Ctrl-C reaches the whole process group, workers too
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 180
    while not list(out.glob("*/*/*/seed-*/run.json")):
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    log = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, log
    assert "Traceback" not in log and log.strip().splitlines()[-1].startswith("interrupted")
    runs = discover([out]).runs
    assert runs and all(len(r.iterations) for r in runs)  # what finished is whole
    assert not (out / LOCK_NAME).exists()
    assert json.loads((out / OUTPUTS_FILE).read_text())["paths"]  # recorded for the next run
