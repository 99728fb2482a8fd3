"""The local job backend: worker processes, per-device placement, failures as one-line results."""

from __future__ import annotations

import os

import fleetkit
import pytest

from servecal.profiler.jobs import Gpu, Job, LocalBackend, Resources, open_backend
from servecal.util.errors import InputError

FAKE_GPUS = (
    Gpu(0, "GPU-aaaa", "NVIDIA H100 80GB HBM3"),
    Gpu(1, "GPU-bbbb", "NVIDIA H100 80GB HBM3"),
    Gpu(2, "GPU-cccc", "NVIDIA A100-SXM4-80GB"),
)


def run_all(backend, jobs):
    seen = []
    results = list(backend.run(jobs, progress=lambda r, done, total: seen.append((done, total))))
    return {r.key: r for r in results}, seen


def test_results_errors_and_crashes_come_back_per_job():
    jobs = [
        Job("sq", fleetkit.square, (7,)),
        Job("boom", fleetkit.explode, ("bad grid",)),
        Job("crash", fleetkit.die),
        Job("after", fleetkit.square, (3,)),
        Job("lambda", lambda: 1),  # cannot pickle: this job fails, not the run
    ]
    with LocalBackend(num_cpus=2) as backend:
        results, seen = run_all(backend, jobs)
    assert results["sq"].value == 49 and results["after"].value == 9
    assert results["boom"].error == "RuntimeError: bad grid"  # one line, the first
    assert "second line of detail" in results["boom"].detail
    assert results["crash"].error.startswith("worker process died with exit code -9")
    assert results["lambda"].error.startswith("job not sendable to a worker: ")
    assert seen == [(i, 5) for i in range(1, 6)]
    assert results["sq"].where["pid"] != os.getpid()  # never in the driver


def test_gpu_jobs_each_get_their_own_device_at_the_same_time(tmp_path):
    """Two 1-GPU jobs meet (so they run together) and hold different devices."""
    jobs = [
        Job(k, fleetkit.meet, (str(tmp_path), k, 2), resources=Resources(num_gpus=1))
        for k in ("a", "b")
    ]
    with LocalBackend(num_cpus=2, gpus=FAKE_GPUS) as backend:
        results, _ = run_all(backend, jobs)
    assert all(r.ok for r in results.values()), results
    visible = {r.value["visible"] for r in results.values()}
    assert visible == {"GPU-aaaa", "GPU-bbbb"}  # by UUID, lowest indices first
    assert {tuple(r.where["gpus"]) for r in results.values()} == {("0",), ("1",)}


def test_device_kinds_tp_and_cpu_jobs_see_the_right_devices(tmp_path):
    def alone(key: str, resources: Resources) -> Job:
        (tmp_path / key).mkdir()
        return Job(key, fleetkit.meet, (str(tmp_path / key), key, 1), resources=resources)

    jobs = [
        alone("a100", Resources(num_gpus=1, accelerator_type="A100")),
        alone("tp2", Resources(num_gpus=2, accelerator_type="H100")),
        alone("cpu", Resources()),
        Job("l4", fleetkit.square, (2,), resources=Resources(num_gpus=1, accelerator_type="L4")),
        Job("many", fleetkit.square, (2,), resources=Resources(num_cpus=4)),
    ]
    with LocalBackend(num_cpus=3, gpus=FAKE_GPUS) as backend:
        results, _ = run_all(backend, jobs)
    assert results["a100"].value["visible"] == "GPU-cccc"
    assert results["tp2"].value["visible"] == "GPU-aaaa,GPU-bbbb"
    assert results["cpu"].value["visible"] == ""  # a CPU job is given no GPU
    assert results["l4"].error.startswith("needs 1 L4 GPU(s); visible here: 3")
    assert results["many"].error == "needs 4 CPUs; this host has 3"


def test_jobs_wait_for_their_resources_one_device_at_a_time(tmp_path):
    """Three 1-GPU jobs on one device: never two at once (each sees the device alone)."""
    jobs = [Job(k, fleetkit.span, (0.3,), resources=Resources(num_gpus=1)) for k in ("a", "b", "c")]
    with LocalBackend(num_cpus=4, gpus=FAKE_GPUS[:1]) as backend:
        results, _ = run_all(backend, jobs)
    assert all(r.ok for r in results.values())
    pids = {r.where["pid"] for r in results.values()}
    assert len(pids) == 3  # a fresh worker per GPU job: its memory goes back when it ends
    spans = sorted(r.value for r in results.values())
    assert all(end <= nxt_start for (_, end), (nxt_start, _) in zip(spans, spans[1:], strict=False))


def test_many_short_jobs_reuse_the_cpu_workers_and_each_comes_back_once():
    """A sweep's shape: many one-CPU jobs through two long-lived workers."""
    jobs = [Job(str(i), fleetkit.square, (i,)) for i in range(300)]
    with LocalBackend(num_cpus=2) as backend:
        results, seen = run_all(backend, jobs)
    assert len({r.where["pid"] for r in results.values()}) <= 2
    assert {k: r.value for k, r in results.items()} == {str(i): i * i for i in range(300)}
    assert [d for d, _ in seen] == list(range(1, 301))


def test_open_backend_refuses_unknown_names_and_an_address_for_local():
    with pytest.raises(InputError, match="unknown backend 'slurm'"):
        open_backend("slurm")
    with pytest.raises(InputError, match="--address is for --backend ray"):
        open_backend("local", "auto")
