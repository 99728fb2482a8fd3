"""The sweep loop: out-of-memory points are recorded as infeasible and the sweep goes on."""

import numpy as np
import pytest

from servecal.profiler import runner
from servecal.profiler.design import Point
from servecal.profiler.model import build_model
from servecal.profiler.runner import MeasureConfig
from servecal.profiler.shapes import ModelShape
from servecal.profiler.shards import ShardStore
from servecal.profiler.sweep import StopFlag, run_sweep
from servecal.profiler.timing import CpuClock, LayerScale


def test_out_of_memory_point_is_infeasible_and_the_sweep_goes_on(tmp_path, monkeypatch):
    shape = ModelShape.from_name("tiny")
    model = build_model(shape, "cpu", n_layers=1)
    plan = [Point(1, 0, 8, 0), Point(64, 0, 4096, 0), Point(0, 8, 0, 0)]
    real = runner.point_batch

    def fake_oom(m, point):
        if point.n_decode == 64:
            raise RuntimeError("CUDA out of memory. Tried to allocate 80.00 GiB")
        return real(m, point)

    monkeypatch.setattr(runner, "point_batch", fake_oom)
    store = ShardStore(tmp_path)
    seen = []
    outcome = run_sweep(
        model,
        plan,
        store,
        scale=LayerScale(1, shape.n_layers),
        measure=MeasureConfig(repeats=3, warmup=1),
        clock=CpuClock(),
        meter=None,
        stop=StopFlag(),
        rng=np.random.default_rng(0),
        on_progress=seen.append,
    )
    assert seen[0].label == "calibrating" and seen[-1].label == "calibrated"
    assert seen[-1].done == seen[-1].planned == 3 and seen[-1].left_s is None
    assert outcome.stopped_by == "complete" and outcome.measured == 2 and outcome.infeasible == 1
    assert store.done() == {0: "ok", 1: "infeasible", 2: "ok"}
    (bad,) = store.infeasible()
    assert bad["point"] == [64, 0, 4096, 0] and "out of memory" in bad["reason"]
    assert len(store.frame()) == 2 * 3


def test_a_real_error_is_not_swallowed(tmp_path, monkeypatch):
    shape = ModelShape.from_name("tiny")
    model = build_model(shape, "cpu", n_layers=1)

    def broken(m, point):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(runner, "point_batch", broken)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        runner.measure_block(
            model,
            [Point(1, 0, 8, 0)],
            LayerScale(1, 4),
            MeasureConfig(),
            CpuClock(),
            None,
            np.random.default_rng(0),
        )
