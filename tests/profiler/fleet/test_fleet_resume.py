"""Ctrl-C on `servecal fleet`, then a rerun: no finished job or measured point lost or redone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from fleetkit import write_plan

from servecal.profiler.shards import ShardStore

#: 27 points measured 4 at a time: several blocks, so there is a middle to interrupt.
LONG_GRID = {"n_decode": [0, 1, 2, 4], "chunk": [0, 8, 16, 32], "ctx": [16, 64], "prefix": [0]}


def test_interrupted_fleet_resumes_without_remeasuring(tmp_path):
    jobs = [
        {"name": "first", "device": "cpu", "model": "tiny"},
        # repeats: each block takes long enough that a starved test process still
        # interrupts the job in its middle on a loaded host
        {
            "name": "second",
            "device": "cpu",
            "model": "tiny",
            "grid": LONG_GRID,
            "block": 4,
            "repeats": 50,
        },
    ]
    plan = write_plan(tmp_path, jobs)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "servecal", "fleet", str(plan), "--out", str(out)]
    # A session of its own: Ctrl-C in a terminal reaches the driver and its workers alike.
    # SIGINT as a terminal delivers it: a suite run in the background (``&``, nohup)
    # hands its children SIGINT ignored, and Python then keeps ignoring it.
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    store = ShardStore(out / "jobs" / "second")
    deadline = time.monotonic() + 1200  # a hang guard
    while len(store.done()) < 1:
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "the second job never measured a point"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)
    log = proc.communicate(timeout=1200)[0]  # a hang guard
    assert proc.returncode == 130, log
    assert "interrupted: finished jobs and measured points are kept" in log

    index = json.loads((out / "index.json").read_text())["jobs"]
    assert index["first"]["status"] == "ok"
    assert index["second"]["status"] == "interrupted"
    planned = len(store.read_plan()["points"])
    kept = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in store.root.glob("p*.parquet")}
    assert 0 < len(kept) < planned
    first = out / "jobs" / "first" / "fleet-job.json"
    first_record = first.read_bytes()

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)  # a hang guard
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 to run" in again.stderr and "1 finished before" in again.stderr
    assert first.read_bytes() == first_record  # the finished job was not run again
    now = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in store.root.glob("p*.parquet")}
    assert len(now) == planned  # every point measured once the rerun ends ...
    assert all(now[name] == kept[name] for name in kept)  # ... and none measured twice
    index = json.loads((out / "index.json").read_text())["jobs"]
    assert index["second"]["status"] == "ok" and index["second"]["points_measured"] == planned
