"""--stream-iterations: the iteration rows written in batches as the run goes give
the same run folder as the rows kept to the end; what cannot stream is refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from enginekit import random_requests
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels import AnalyticPredictor
from servecal.sched import iteration_stream
from servecal.sched.engine import Engine, EngineConfig
from servecal.sched.experiment.study import run_spec
from servecal.sched.experiment.sweep import Task, execute
from servecal.sched.policies.registry import PolicySpec
from servecal.sched.policies.sloweave import SLOWeave
from servecal.sched.truth import AnalyticTruth
from servecal.util.arrow_numpy import read_parquet
from servecal.util.errors import InputError

runner = CliRunner()
#: Wall-clock time of each plan call: the one column two runs of a spec do not share.
TIMED = ["decision_us"]


def _engine(stream_to: str | None = None, executor=None, observers=()) -> Engine:
    requests = random_requests(np.random.default_rng(3), 120, rate=60.0)
    truth = AnalyticTruth()
    return Engine(
        requests,
        SLOWeave(),
        AnalyticPredictor(),
        executor or truth.executor(np.random.default_rng(0)),
        EngineConfig(stream_iterations_to=stream_to),
        observers=observers,
    )


def test_streamed_run_equals_the_kept_run_over_many_row_groups(tmp_path, monkeypatch):
    monkeypatch.setattr(iteration_stream, "BATCH", 100)  # many row groups, a partial last
    kept = _engine().run()
    path = tmp_path / ".iterations.x.tmp"
    streamed_engine = _engine(str(path))
    streamed = streamed_engine.run()
    n = len(kept.iteration_columns["duration_ms"])
    assert n > 300 and len(streamed_engine.log) == n
    assert len(streamed_engine.log.rows) == 0  # nothing held past the last batch
    import pyarrow.parquet as pq

    assert pq.ParquetFile(path).num_row_groups == -(-n // 100)
    pd.testing.assert_frame_equal(
        streamed.iterations.drop(columns=TIMED), kept.iterations.drop(columns=TIMED)
    )
    pd.testing.assert_frame_equal(streamed.requests, kept.requests)


def test_streamed_run_folder_equals_the_kept_one(tmp_path):
    policy = PolicySpec.parse("sloweave-p50", {})
    folders = {}
    for streamed in (False, True):
        spec = run_spec("mixed", policy, 100.0, 20.0, "engine", n_requests=150,
                        stream_iterations=streamed)  # fmt: skip
        folder = tmp_path / f"out-{streamed}" / "seed-0"
        execute(Task(spec, 0, str(folder)))
        folders[streamed] = folder
        assert [p.name for p in folder.parent.iterdir()] == ["seed-0"]  # no temporary left
    frames = {
        k: read_parquet(f / "iterations.parquet").to_pandas().drop(columns=TIMED)
        for k, f in folders.items()
    }
    assert len(frames[True]) > 500
    pd.testing.assert_frame_equal(frames[True], frames[False])
    requests = {k: read_parquet(f / "requests.parquet").to_pandas() for k, f in folders.items()}
    pd.testing.assert_frame_equal(requests[True], requests[False])


class _Crash:
    """An executor that fails after some iterations (an interrupted run)."""

    def __init__(self, inner, after: int) -> None:
        self.inner, self.left = inner, after

    def execute(self, *args):
        self.left -= 1
        if self.left < 0:
            raise KeyboardInterrupt
        return self.inner.execute(*args)


def test_an_interrupted_streamed_run_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(iteration_stream, "BATCH", 50)
    path = tmp_path / ".iterations.x.tmp"
    crash = _Crash(AnalyticTruth().executor(np.random.default_rng(0)), after=170)
    with pytest.raises(KeyboardInterrupt):
        _engine(str(path), executor=crash).run()
    assert not path.exists()


def test_observers_that_add_columns_are_refused(tmp_path):
    class Watch:
        def observe(self, record):
            return {"seen": 1.0}

    with pytest.raises(InputError, match="--stream-iterations"):
        _engine(str(tmp_path / "x"), observers=[Watch()])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--policy", "sloweave", "--monitor"], "--stream-iterations with --monitor"),
        (["--policy", "flowprefill"], "engine backend only"),
    ],
)
def test_simulate_refuses_what_cannot_stream_in_one_line(tmp_path, extra, message):
    args = ["simulate", "--workload", "chat", "--tpot-slo", "25", "--requests", "5",
            "--out", str(tmp_path / "x"), "--stream-iterations", *extra]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x").exists()
