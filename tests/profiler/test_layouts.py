"""measure_block runs whatever layout it is handed, with the pre-roll that layout asks for."""

from typing import ClassVar

import numpy as np

from servecal.profiler.design import Point
from servecal.profiler.model import build_model
from servecal.profiler.runner import ContiguousLayout, MeasureConfig, measure_block
from servecal.profiler.shapes import ModelShape
from servecal.profiler.timing import CpuClock, LayerScale

TINY = ModelShape.from_name("tiny")


class CountingPoint:
    def __init__(self, point: Point) -> None:
        self.point, self.calls = point, 0

    def time(self, clock) -> list[float]:
        self.calls += 1
        return [0.1, 1.0 + self.point.n_decode, 0.1]


class CountingLayout:
    name: ClassVar[str] = "counting"
    preroll: ClassVar[int] = 2

    def __init__(self) -> None:
        self.prepared: list[CountingPoint] = []

    def prepare(self, model, point: Point) -> CountingPoint:
        self.prepared.append(CountingPoint(point))
        return self.prepared[-1]


def _measure(points: list[Point], layout) -> list:
    model = build_model(TINY, "cpu", n_layers=1)
    cfg = MeasureConfig(repeats=3, warmup=1, block=len(points))
    scale = LayerScale(1, TINY.n_layers)
    return measure_block(model, points, scale, cfg, CpuClock(), None, np.random.default_rng(0),
                         layout=layout)  # fmt: skip


def test_interleaved_points_are_prerolled_before_every_timed_repeat():
    layout = CountingLayout()
    rows = _measure([Point(1, 0, 8, 0), Point(3, 0, 8, 0)], layout)
    assert [p.calls for p in layout.prepared] == [1 + 3 * (2 + 1)] * 2
    # the rows are the timed calls only, scaled like any other segments
    assert [r["ms"] for r in rows[0]] == [0.1 + 2.0 * TINY.n_layers + 0.1] * 3


def test_a_point_timed_alone_needs_no_preroll():
    layout = CountingLayout()
    _measure([Point(2, 0, 8, 0)], layout)
    assert [p.calls for p in layout.prepared] == [1 + 3]


def test_the_default_layout_is_the_profilers_contiguous_one():
    rows = _measure([Point(2, 0, 16, 0), Point(0, 8, 0, 0)], None)
    assert all(len(r) == 3 and all(x["ms"] > 0 for x in r) for r in rows)
    assert ContiguousLayout.name == "contiguous" and ContiguousLayout.preroll == 0
