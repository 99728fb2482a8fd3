"""`servecal calibrate`: Ctrl-C at any moment exits 130 keeping the run; one writer per folder."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from servecal.cli import app
from servecal.profiler.shards import ShardStore

GRID = {"n_decode": [0, 1, 2, 4], "chunk": [0, 8, 16, 32], "ctx": [16, 64], "prefix": [0, 32]}


def start(out: Path, grid: Path, block: int) -> subprocess.Popen:
    # 400 repeats: the run cannot end before the signal, even on a loaded host
    cmd = [sys.executable, "-m", "servecal", "calibrate", "--device", "cpu", "--model", "tiny",
           "--grid", str(grid), "--repeats", "400", "--threads", "1", "--no-fit",
           "--block", str(block), "--out", str(out)]  # fmt: skip
    # SIGINT as a terminal delivers it: a suite run in the background (``&``, nohup)
    # hands its children SIGINT ignored, and Python then keeps ignoring it.
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_for(path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while not path.exists():
        assert proc.poll() is None, f"run ended early:\n{proc.stdout.read()}"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def test_ctrl_c_before_the_first_block_exits_130_and_keeps_the_plan(tmp_path: Path) -> None:
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps(GRID))
    out = tmp_path / "run"
    store = ShardStore(out)
    first = start(out, grid, 64)  # one block of every point: nothing lands before it ends
    wait_for(store.plan_path, first)
    time.sleep(0.5)
    first.send_signal(signal.SIGINT)
    log = first.communicate(timeout=120)[0]
    assert first.returncode == 130, log
    assert "Traceback" not in log and "--resume" in log
    assert store.done() == {}  # nothing was measured ...
    assert store.read_plan()["points"]  # ... and the plan is kept for --resume


def test_a_second_calibrate_on_the_folder_is_refused_naming_the_first(tmp_path: Path) -> None:
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps(GRID))
    out = tmp_path / "run"
    first = start(out, grid, 4)
    try:
        wait_for(ShardStore(out).plan_path, first)
        second = CliRunner().invoke(app, ["calibrate", "--out", str(out), "--resume"])
        assert second.exit_code == 2, second.output
        lines = [x for x in second.output.splitlines() if x.strip()]
        assert len(lines) == 1 and f"pid {first.pid}" in lines[0], second.output
        assert "another servecal calibrate is writing" in lines[0]
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=120)
    assert first.returncode == 130
