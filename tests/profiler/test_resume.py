"""`servecal calibrate` stopped by SIGINT, then SIGKILL, resumes: no point lost or repeated."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from servecal.costmodels.samples import read_samples
from servecal.profiler.shards import ShardStore

GRID = {"n_decode": [0, 1, 2, 4], "chunk": [0, 8, 16, 32], "ctx": [16, 64], "prefix": [0, 32]}
REPEATS = 5


def start(out: Path, grid: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "servecal", "calibrate", "--device", "cpu", "--model", "tiny"]
    cmd += ["--grid", str(grid), "--repeats", str(REPEATS), "--threads", "1", "--no-fit"]
    cmd += ["--block", "8"]  # several blocks, so there is a "middle" to interrupt
    return subprocess.Popen(
        [*cmd, "--out", str(out), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def resume(out: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "servecal", "calibrate", "--out", str(out), "--resume", "--no-fit"]
    cmd += ["--block", "8"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_shards(store: ShardStore, more_than: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while len(store.done()) <= more_than:
        assert proc.poll() is None, (
            f"run ended before it could be interrupted:\n{proc.stdout.read()}"
        )
        assert time.monotonic() < deadline, "no shard appeared"
        time.sleep(0.01)


def shard_bytes(store: ShardStore) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in store.root.glob("p*.parquet")}


def test_sigint_then_sigkill_then_resume_loses_and_repeats_nothing(tmp_path):
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps(GRID))
    out = tmp_path / "run"
    store = ShardStore(out)

    first = start(out, grid)
    wait_for_shards(store, 0, first)
    first.send_signal(signal.SIGINT)
    log = first.communicate(timeout=120)[0]
    assert first.returncode == 130, log
    assert "--resume" in log
    planned = len(store.read_plan()["points"])
    after_int = shard_bytes(store)
    assert 0 < len(after_int) < planned
    # What a stopped run measured is already readable as samples.
    assert len(read_samples(out / "samples.parquet").frame) == len(after_int) * REPEATS

    second = resume(out)
    wait_for_shards(store, len(after_int), second)
    os.kill(second.pid, signal.SIGKILL)
    second.communicate(timeout=60)
    assert second.returncode == -signal.SIGKILL
    after_kill = shard_bytes(store)
    assert len(after_kill) < planned
    assert all(after_kill[name] == data for name, data in after_int.items())

    third = resume(out)
    log = third.communicate(timeout=180)[0]
    assert third.returncode == 0, log
    final = shard_bytes(store)
    assert all(final[name] == data for name, data in after_kill.items())  # kept, not redone
    frame = read_samples(out / "samples.parquet").frame
    keys = ["n_decode", "chunk", "ctx", "prefix"]
    per_point = frame.groupby(keys).rep.agg(["count", "nunique"])
    plan_points = {tuple(p) for p in store.read_plan()["points"]}
    assert set(per_point.index) == plan_points  # none lost
    assert (per_point["count"] == REPEATS).all() and (per_point["nunique"] == REPEATS).all()
    assert not list(store.root.glob(".*.tmp"))  # no half-written shard left behind


# --- the same at TP 2: rank 0 (the process signalled) owns the shards; its gloo follower
# --- exits with it, even when rank 0 is SIGKILLed.

TP_GRID = {"n_decode": [0, 1, 4], "chunk": [0, 8, 32], "ctx": [16, 64], "prefix": [0]}


def session_processes(sid: int) -> list[int]:
    """Live processes of session ``sid`` (a run started with start_new_session: its ranks)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def wait_until_gone(sid: int) -> None:
    deadline = time.monotonic() + 30
    while session_processes(sid):
        assert time.monotonic() < deadline, f"ranks still alive: {session_processes(sid)}"
        time.sleep(0.1)


def run_tp(out: Path, *args: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "servecal", "calibrate", "--out", str(out), "--no-fit"]
    cmd += ["--block", "4", *args]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def test_tp2_run_interrupted_killed_and_resumed_loses_nothing(tmp_path):
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps(TP_GRID))
    out = tmp_path / "run"
    store = ShardStore(out)
    first = run_tp(out, "--device", "cpu", "--model", "tiny", "--tp", "2", "--grid", str(grid),
                   "--repeats", str(REPEATS), "--threads", "1")  # fmt: skip
    wait_for_shards(store, 0, first)
    first.send_signal(signal.SIGINT)
    log = first.communicate(timeout=120)[0]
    assert first.returncode == 130, log
    wait_until_gone(first.pid)
    after_int = shard_bytes(store)
    planned = len(store.read_plan()["points"])
    assert 0 < len(after_int) < planned and store.read_plan()["tp"] == 2

    second = run_tp(out, "--resume")  # the plan's TP 2
    wait_for_shards(store, len(after_int), second)
    assert len(session_processes(second.pid)) >= 2  # rank 0 and its follower
    os.kill(second.pid, signal.SIGKILL)
    second.communicate(timeout=60)
    wait_until_gone(second.pid)  # the follower noticed rank 0 was gone and left
    after_kill = shard_bytes(store)
    assert all(after_kill[name] == data for name, data in after_int.items())

    third = run_tp(out, "--resume")
    log = third.communicate(timeout=300)[0]
    assert third.returncode == 0, log
    wait_until_gone(third.pid)
    final = shard_bytes(store)
    assert all(final[name] == data for name, data in after_kill.items())  # kept, not redone
    samples = read_samples(out / "samples.parquet")
    per_point = samples.frame.groupby(["n_decode", "chunk", "ctx", "prefix"]).rep.agg(
        ["count", "nunique"]
    )
    assert set(per_point.index) == {tuple(p) for p in store.read_plan()["points"]}
    assert (per_point["count"] == REPEATS).all() and (per_point["nunique"] == REPEATS).all()
    assert samples.provenance["tp"] == 2 and samples.provenance["collective_backend"] == "gloo"
