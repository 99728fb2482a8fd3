"""The Ray job backend and `servecal fleet --backend ray` on one local Ray instance.

Ray starts once for the module (seconds) with 2 CPUs and 2 fake GPUs: the GPUs are
only resources to place jobs by; nothing here touches CUDA.
"""

from __future__ import annotations

import json

import fleetkit
import pyarrow.dataset as ds
import pytest
import ray
from fleetkit import two_cpu_jobs, write_plan
from typer.testing import CliRunner

from servecal.cli import app
from servecal.profiler.jobs import Job, Resources
from servecal.profiler.jobs.ray_backend import RayBackend

# One Ray instance per xdist worker: the whole module runs on one of them.
pytestmark = [pytest.mark.ray, pytest.mark.xdist_group("ray")]
runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def cluster():
    # fleetkit is importable in this process only (pytest put its folder on sys.path):
    # ship its functions by value to Ray's workers.
    ray.cloudpickle.register_pickle_by_value(fleetkit)
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_two_fake_gpu_jobs_each_see_a_distinct_gpu(tmp_path):
    jobs = [
        Job(k, fleetkit.meet, (str(tmp_path), k, 2), resources=Resources(num_gpus=1))
        for k in ("a", "b")
    ]
    backend = RayBackend()
    results = {r.key: r for r in backend.run(jobs)}
    assert all(r.ok for r in results.values()), results
    ids = [r.value["ray_gpu_ids"] for r in results.values()]
    assert sorted(ids) == [["0"], ["1"]]
    assert {r.value["visible"] for r in results.values()} == {"0", "1"}  # Ray set it per task
    assert sorted(r.where["gpus"] for r in results.values()) == [["0"], ["1"]]
    backend.close()
    assert ray.is_initialized()  # a backend leaves an instance it did not start running


def test_failures_are_results_and_the_others_finish():
    jobs = [
        Job("boom", fleetkit.explode, ("out of memory",)),
        Job("crash", fleetkit.die),
        Job("three-gpus", fleetkit.square, (2,), resources=Resources(num_gpus=3)),
        Job("h100", fleetkit.square, (2,), resources=Resources(1, 1, "H100")),
        Job("ok", fleetkit.square, (5,)),
    ]
    seen = []
    results = {
        r.key: r for r in RayBackend().run(jobs, progress=lambda r, d, t: seen.append((d, t)))
    }
    assert results["ok"].value == 25
    assert results["boom"].error == "RuntimeError: out of memory"
    assert results["crash"].error.startswith("WorkerCrashedError")
    assert results["three-gpus"].error.startswith("needs 1 CPUs and 3 GPU(s) on one node")
    assert "H100 GPU(s)" in results["h100"].error  # no node carries that accelerator type
    assert seen == [(i, 5) for i in range(1, 6)]


def test_a_bounded_number_of_tasks_in_flight_still_returns_every_job_once():
    jobs = [Job(str(i), fleetkit.square, (i,)) for i in range(40)]
    results = list(RayBackend(max_in_flight=3).run(jobs))
    assert sorted(int(r.key) for r in results) == list(range(40))
    assert all(r.value == int(r.key) ** 2 for r in results)


def test_cpu_plan_on_ray_matches_the_local_backend(tmp_path):
    """The same two-job tiny plan on both backends: same grids, same schema, same index keys."""
    bad = {"name": "bad", "device": "cpu", "model": "tiny", "layers": 9}
    plan = write_plan(tmp_path, [*two_cpu_jobs(), bad])
    outs = {}
    for backend in ("ray", "local"):
        out = tmp_path / backend
        result = runner.invoke(app, ["fleet", str(plan), "--out", str(out), "--backend", backend])
        assert result.exit_code == 1, result.output  # the bad job fails, the others finish
        assert "failed: bad" in result.output
        outs[backend] = out
    index = {b: json.loads((o / "index.json").read_text())["jobs"] for b, o in outs.items()}
    assert index["ray"]["bad"]["error"] == index["local"]["bad"]["error"]
    for name in ("tiny-a", "tiny-b"):
        ray_job, local_job = index["ray"][name], index["local"][name]
        assert ray_job["status"] == local_job["status"] == "ok"
        assert ray_job["where"]["backend"] == "ray" and ray_job["where"]["node"]
        assert set(ray_job) == set(local_job)
        plans = [
            json.loads((outs[b] / "jobs" / name / "shards" / "plan.json").read_text()) for b in outs
        ]
        assert plans[0]["points"] == plans[1]["points"] and plans[0]["grid"] == plans[1]["grid"]
        assert ray_job["points_measured"] == local_job["points_measured"]
    tables = {b: ds.dataset(o / "samples", partitioning="hive").to_table() for b, o in outs.items()}
    assert tables["ray"].schema == tables["local"].schema
    assert tables["ray"].num_rows == tables["local"].num_rows > 0
