"""The sweep loop: visit planned points until done, out of budget, or asked to stop.

Points are measured in blocks of ``cfg.block`` consecutive plan entries (their
repeats interleaved, see :func:`measure_block`); each finished point becomes a
shard at once. Stopping is always *between* blocks: with a budget, the first
block always runs, later ones shrink to the points that still fit (from the
running mean time per point) and none starts once the budget is spent;
SIGINT/SIGTERM set a flag read between repeat rounds: the block in progress is
abandoned (its points stay unmeasured) and the loop ends (a second SIGINT stops
at once). A point is on disk whole or not at all.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from servecal.profiler.design import Point
from servecal.profiler.energy import EnergyMeter
from servecal.profiler.model import Transformer
from servecal.profiler.runner import MeasureConfig, PointInfeasible, PointLayout, measure_block
from servecal.profiler.shards import ShardStore
from servecal.profiler.timing import CpuClock, CudaClock, LayerScale


class StopFlag:
    """Set by SIGINT/SIGTERM while :meth:`installed`; read by the loop between points."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def _handle(self, signum: int, frame: object) -> None:
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # second Ctrl-C: the user really means now
        self.signal = signum

    @contextmanager
    def installed(self) -> Iterator[StopFlag]:
        previous = {}
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, self._handle)
        except ValueError:  # not the main thread: run without handlers
            pass
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


@dataclass(frozen=True)
class SweepOutcome:
    measured: int  # points measured in this call
    infeasible: int  # points found infeasible in this call
    remaining: int  # planned points still without a shard
    stopped_by: str  # "complete", "budget" or "signal"
    elapsed_s: float


@dataclass(frozen=True)
class SweepStatus:
    """What the progress callback sees: ``done`` of ``planned`` points have a shard,
    ``label`` is the block being measured (or ``calibrated``/``stopped`` at the end),
    ``left_s`` the budget left (``None``: no budget)."""

    done: int
    planned: int
    label: str
    left_s: float | None


def _block_size(
    block: int, budget_s: float | None, elapsed_s: float, per_point_s: float | None
) -> int:
    """Points in the next block: ``block``, shrunk to what still fits the budget at
    ``per_point_s`` (0: the budget is spent). The first block always runs."""
    if budget_s is None or per_point_s is None:
        return block
    remaining_s = budget_s - elapsed_s
    return 0 if remaining_s <= 0 else min(block, int(remaining_s / per_point_s))


def _store_results(
    store: ShardStore, block: list[int], points: list[Point], results: list[Any]
) -> tuple[int, int]:
    """Write a block's shards; ``(measured, infeasible)`` (a point a stop abandoned is
    neither)."""
    measured = infeasible = 0
    for index, point, result in zip(block, points, results, strict=True):
        if result is None:  # abandoned by a stop signal: not measured
            continue
        if isinstance(result, PointInfeasible):
            store.write_infeasible(index, point, str(result))
            infeasible += 1
        else:
            store.write_rows(index, result)
            measured += 1
    return measured, infeasible


def run_sweep(
    model: Transformer,
    plan: list[Point],
    store: ShardStore,
    *,
    scale: LayerScale,
    measure: MeasureConfig,
    clock: CpuClock | CudaClock,
    meter: EnergyMeter | None,
    stop: StopFlag,
    rng: np.random.Generator,
    budget_s: float | None = None,
    layout: PointLayout | None = None,
    on_progress: Callable[[SweepStatus], None] | None = None,
) -> SweepOutcome:
    """Measure every planned point of ``model`` without a shard in ``store``, in plan
    order (``layout``: see :func:`~servecal.profiler.runner.measure_block`);
    ``on_progress`` is called before each block and at the end."""
    done = store.done()
    todo = [i for i in range(len(plan)) if i not in done]
    start = time.monotonic()
    measured = infeasible = 0
    stopped_by = "complete"
    cfg = measure

    def report(label: str) -> None:
        if on_progress is not None:
            left = None if budget_s is None else max(0.0, budget_s - (time.monotonic() - start))
            on_progress(SweepStatus(len(store.done()), len(plan), label, left))

    report("calibrating")
    first = 0
    per_point_s: float | None = None  # running mean, to keep blocks inside the budget
    while first < len(todo):
        if stop.signal is not None:
            stopped_by = "signal"
            break
        size = _block_size(cfg.block, budget_s, time.monotonic() - start, per_point_s)
        if size < 1:
            stopped_by = "budget"
            break
        block = todo[first : first + size]
        first += len(block)
        points = [plan[i] for i in block]
        block_start = time.monotonic()
        report(points[0].label() + (f" +{len(points) - 1}" if len(points) > 1 else ""))
        results = measure_block(
            model,
            points,
            scale,
            cfg,
            clock,
            meter,
            rng,
            lambda: stop.signal is not None,
            layout,
        )
        if model.device.type == "cuda":  # hand back the block's KV before the next sizes
            torch.cuda.empty_cache()
        seconds = (time.monotonic() - block_start) / len(block)
        per_point_s = seconds if per_point_s is None else 0.7 * per_point_s + 0.3 * seconds
        wrote, refused = _store_results(store, block, points, results)
        measured, infeasible = measured + wrote, infeasible + refused
    report("calibrated" if stopped_by == "complete" else "stopped")
    remaining = len(plan) - len(store.done())
    if stopped_by == "complete" and remaining:
        stopped_by = "signal" if stop.signal is not None else "budget"
    return SweepOutcome(measured, infeasible, remaining, stopped_by, time.monotonic() - start)
