"""Sweeps on Ray: `compare --pool ray` and its max-goodput search give the local numbers.

Ray starts once for the module's Ray tests (seconds) with 2 CPUs; the tests that
check what happens without Ray, or with a bad pool choice, never start it.
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels import InputError
from servecal.sched.experiment import RunSpec
from servecal.sched.policies import PolicySpec

# the module (the package's `sweep` attribute is the function)
sweep_module = importlib.import_module("servecal.sched.experiment.sweep")

runner = CliRunner()


def on_ray(test):
    """A Ray test: it shares one xdist worker with the other Ray tests (the fleet's), so
    `pytest -n 2` starts Ray on one worker only (pyproject's --dist loadgroup)."""
    return pytest.mark.ray(pytest.mark.xdist_group("ray")(test))


#: A small grid: 2 policies × 2 seeds of the chat workload.
GRID = ["--workloads", "chat", "--policies", "fixed-256,sloweave", "--tpot-slo", "25",
        "--seeds", "2", "--requests", "100"]  # fmt: skip
#: A max-goodput search whose maxima lie inside the bracket (measured, not bounds).
SEARCH = ["--workloads", "long", "--policies", "fixed-256,sloweave", "--tpot-slo", "25",
          "--seeds", "2", "--requests", "120", "--max-goodput", "--rate-range", "5:40"]  # fmt: skip


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _compare(out: Path, args: list[str], *pool: str) -> list[dict]:
    result = runner.invoke(app, ["compare", *args, "--out", str(out), "--jobs", "2", "--json",
                                 *pool])  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _run_folders(root: Path) -> dict[str, dict]:
    """Every run folder under ``root``: run.json and both tables, less what measures
    this machine's speed (decision times) or names the invocation."""
    folders = {}
    for doc_path in sorted(root.rglob("run.json")):
        folder = doc_path.parent
        doc = json.loads(doc_path.read_text())
        assert doc.pop("invocation")  # stamped on the worker, so the command knows its runs
        doc["summary"].pop("decision_us_median")
        iterations = pd.read_parquet(folder / "iterations.parquet").drop(columns="decision_us")
        requests = pd.read_parquet(folder / "requests.parquet")
        folders[str(folder.relative_to(root))] = {"doc": doc, "it": iterations, "req": requests}
    return folders


def _outputs(root: Path) -> list[str]:
    return json.loads((root / ".servecal-outputs.json").read_text())["paths"]


def _no_local_pool(*args: object) -> None:
    raise AssertionError("--pool ray ran a local pool")


@on_ray
def test_compare_on_ray_reproduces_the_local_rows_and_run_folders(cluster, tmp_path, monkeypatch):
    local = _compare(tmp_path / "local", GRID)
    monkeypatch.setattr(sweep_module, "_local_pool", _no_local_pool)
    on_ray_rows = _compare(tmp_path / "ray", GRID, "--pool", "ray")
    assert on_ray_rows == local and len(local) == 2
    saved = [json.loads((tmp_path / b / "compare.json").read_text()) for b in ("local", "ray")]
    assert saved[0]["rows"] == saved[1]["rows"] and saved[0]["ratios"] == saved[1]["ratios"]
    here, there = _run_folders(tmp_path / "local"), _run_folders(tmp_path / "ray")
    assert sorted(here) == sorted(there) and len(here) == 4
    for name in here:
        assert here[name]["doc"] == there[name]["doc"], name
        pd.testing.assert_frame_equal(here[name]["it"], there[name]["it"])
        pd.testing.assert_frame_equal(here[name]["req"], there[name]["req"])
    # the runs the Ray workers wrote carry this command's invocation: a rerun into
    # the folder knows them as its own (and would replace them, not keep stale ones)
    assert _outputs(tmp_path / "ray") == _outputs(tmp_path / "local")


@on_ray
def test_the_max_goodput_search_on_ray_reproduces_the_local_one(cluster, tmp_path, monkeypatch):
    local = _compare(tmp_path / "local", SEARCH)
    monkeypatch.setattr(sweep_module, "_local_pool", _no_local_pool)
    on_ray_rows = _compare(tmp_path / "ray", SEARCH, "--pool", "ray")
    assert on_ray_rows == local
    for row in local:  # found inside the bracket's reach, not a bound
        assert row["max_goodput_bound"] == "measured" and row["max_goodput"] > 0
    # seeds differ: real searches (two seeds of one policy may still land on one value
    # of the bisection's grid)
    assert any(len(set(row["max_goodput_per_seed"])) == 2 for row in local)


@on_ray
def test_a_ray_pool_carries_the_callers_settings_and_returns_its_exceptions(
    cluster, tmp_path, monkeypatch
):
    from servecal.profiler.jobs.ray_backend import RayBackend
    from servecal.sched.experiment.goodput import Bracket

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SERVECAL_PROBE", "from-the-driver")
    with RayBackend() as backend:
        pool = backend.pool(max_in_flight=1)
        pid, cwd = pool.submit(os.getpid).result(), pool.submit(os.getcwd).result()
        env = pool.submit(os.getenv, "SERVECAL_PROBE").result()
        assert pid != os.getpid()  # it ran in a Ray worker
        assert env == "from-the-driver" and cwd == str(tmp_path)
        with pytest.raises(ValueError, match="invalid literal") as bad:
            pool.submit(int, "x").result()
        assert type(bad.value) is ValueError  # the function's own exception, not Ray's wrapper
        with pytest.raises(InputError, match=r"^--rate-range '9:1'"):
            pool.submit(Bracket.parse, "9:1").result()
        squares = [pool.submit(pow, k, 2) for k in range(12)]  # one at a time, all come back
        assert [f.result() for f in squares] == [k * k for k in range(12)]
        pool.shutdown()
        with pytest.raises(RuntimeError, match="shut down"):
            pool.submit(pow, 2, 2)


@on_ray
def test_an_interrupted_sweep_on_ray_stops_its_tasks_at_once(cluster):
    with pytest.raises(KeyboardInterrupt), sweep_module.open_pool("ray", jobs=1) as pool:
        slow = pool.submit(time.sleep, 60)
        queued = pool.submit(pow, 3, 2)
        time.sleep(1.0)  # the sleep is running by now (the module's workers are warm)
        raise KeyboardInterrupt  # Ctrl-C in the driver
    # what "at once" decides: the running task was cancelled (not waited for), the
    # queued one never sent
    assert queued.cancelled()  # never sent to Ray
    assert isinstance(slow.exception(timeout=0), cluster.exceptions.TaskCancelledError)
    assert cluster.is_initialized()  # an instance the pool joined is left running


class _ClusterGone:
    """``ray`` as the driver sees it once the cluster is lost: waiting fails."""

    def __init__(self, ray):
        self._ray = ray
        # the loss is noticed only once the test has queued its calls: on a busy host
        # the dispatcher could otherwise fail (and close) the pool between two submits
        self.lost = threading.Event()

    def __getattr__(self, name):
        return getattr(self._ray, name)

    def wait(self, *args, **kwargs):
        self.lost.wait(timeout=30)
        raise ConnectionError("the Ray cluster is gone")


@on_ray
def test_a_lost_cluster_fails_every_waiting_call_instead_of_hanging(cluster):
    from servecal.profiler.jobs.ray_pool import RayPool

    # the dispatcher takes its `ray` when it starts: hand the lost one in from the outset
    gone = _ClusterGone(cluster)
    pool = RayPool(gone, max_in_flight=1)
    running, queued = pool.submit(time.sleep, 2), pool.submit(pow, 2, 2)
    gone.lost.set()
    for future in (running, queued):
        with pytest.raises(ConnectionError, match="gone"):
            future.result(timeout=30)
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(pow, 2, 2)
    pool.shutdown()


# ------------------------------------------------------------ without Ray / bad flags


def test_without_ray_the_ray_pool_is_one_line_and_exit_2(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if not installed
    result = runner.invoke(app, ["compare", *GRID, "--out", str(tmp_path / "o"), "--pool", "ray"])
    assert result.exit_code == 2
    assert result.output == (
        "error: Ray is not installed: pip install 'servecal[ray]' (or pip install 'ray>=2.50')\n"
    )
    assert not (tmp_path / "o" / "compare.json").exists()


def _a_closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens there once closed


class _RayThatMustNotStart:
    """``ray`` where joining is an error: the address is checked before ``ray.init``."""

    @staticmethod
    def is_initialized() -> bool:
        return False

    @staticmethod
    def init(**kwargs):  # noqa: ANN003
        raise AssertionError(f"ray.init reached with {kwargs}")


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_an_address_where_no_cluster_listens_is_one_line_at_once(scheme, tmp_path, monkeypatch):
    # Ray itself retries such an address for minutes: it would look like a hang
    monkeypatch.setitem(sys.modules, "ray", _RayThatMustNotStart)
    address = f"{scheme}127.0.0.1:{_a_closed_port()}"
    # "at once": refused before ray.init (which _RayThatMustNotStart turns into a failure)
    result = runner.invoke(app, ["compare", *GRID, "--out", str(tmp_path / "o"), "--pool", "ray",
                                 "--address", address])  # fmt: skip
    assert result.exit_code == 2
    assert result.output == (
        f"error: no Ray cluster at {address!r}: nothing answers at "
        f"{address.removeprefix('ray://')} (Connection refused)\n"
    )
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--pool", "slurm"], "error: --pool 'slurm': choose local or ray\n"),
        (["--address", "auto"], "error: --address is for --pool ray (a Ray cluster to join)\n"),
    ],
    ids=["unknown-pool", "address-without-ray"],
)
def test_a_bad_pool_choice_is_one_line_before_any_run(flags, message, tmp_path):
    result = runner.invoke(app, ["compare", *GRID, "--out", str(tmp_path / "o"), *flags])
    assert (result.exit_code, result.output) == (2, message)
    assert not list((tmp_path / "o").rglob("run.json"))


class _ElsewhereWithoutAFolder(ThreadPoolExecutor):
    """Runs each task as a worker whose output folder is not this machine's would:
    the summary comes back, the run folder is not where the caller looks."""

    def submit(self, fn, /, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
        (task,) = args
        return super().submit(fn, replace(task, folder=None), **kwargs)


def test_a_run_folder_this_machine_cannot_see_stops_the_sweep_with_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = RunSpec(workload="chat", policy=PolicySpec("sloweave"), tpot_slo_ms=25.0, rate=30.0,
                   n_requests=40, seeds=(0, 1))  # fmt: skip
    with _ElsewhereWithoutAFolder(1) as pool, pytest.raises(InputError) as error:
        sweep_module.sweep([spec], folders=["rel/out"], pool=pool)
    # tasks get absolute folders (a Ray worker starts elsewhere); the line names one
    assert str(error.value).startswith(f"run folder {tmp_path / 'rel' / 'out' / 'seed-'}")
    assert "every worker node shares" in str(error.value)
