"""Measure a block of design points: build batches, warm up, time R repeats, read energy.

Each repeat is timed alone (see :mod:`servecal.profiler.timing`). Energy is read
around a group of back-to-back iterations of one point lasting at least
``energy_window_s`` (NVML's counter moves about every 100 ms) and divided by the
group's size. When only ``k`` of ``L`` layers are built, the per-iteration energy
is scaled like time (estimated full-model time over measured ``k``-layer time:
constant power assumed).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np
import torch

from servecal.profiler.design import Point
from servecal.profiler.energy import EnergyMeter
from servecal.profiler.kv import DecodeGroup, IterationBatch, KVPool, PrefillSegment
from servecal.profiler.model import Transformer
from servecal.profiler.oom import is_out_of_memory
from servecal.profiler.timing import CpuClock, CudaClock, LayerScale, timed_iteration


@dataclass(frozen=True)
class MeasureConfig:
    repeats: int = 20
    warmup: int = 3
    energy_window_s: float = 0.2
    block: int = 1  # points whose repeats are interleaved (memory: all are live at once)

    def __post_init__(self) -> None:
        if self.block < 1:
            raise ValueError(f"block must be >= 1, got {self.block}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")
        if self.energy_window_s < 0:
            raise ValueError(f"energy_window_s must be >= 0, got {self.energy_window_s}")


class PointInfeasible(Exception):
    """The point does not fit the device (out of memory); the sweep records it and goes on."""


def point_batch(model: Transformer, point: Point) -> tuple[IterationBatch, torch.Tensor]:
    """Real KV pools for ``point`` (decodes at ``ctx``, one chunk after ``prefix``) and tokens.

    The pools hold this rank's KV heads (``model.local``); token ids span the whole vocabulary.
    """
    shape, layers, dev, dtype = model.local, len(model.layers), model.device, model.dtype
    decode = None
    if point.n_decode:
        pool = KVPool(shape, layers, point.n_decode, point.ctx + 1, dev, dtype)
        decode = DecodeGroup(pool, range(point.n_decode), [point.ctx] * point.n_decode)
    prefills = []
    if point.chunk:
        pool = KVPool(shape, layers, 1, point.prefix + point.chunk, dev, dtype)
        prefills.append(PrefillSegment(pool, 0, point.prefix, point.chunk))
    batch = IterationBatch(decode, prefills)
    gen = torch.Generator(device=dev).manual_seed(point.n_decode * 7919 + point.chunk)
    tokens = torch.randint(0, model.shape.vocab, (batch.n_tokens,), device=dev, generator=gen)
    return batch, tokens


class PreparedPoint(Protocol):
    """A point ready to be timed: its KV allocated, its tokens drawn."""

    def time(self, clock: CpuClock | CudaClock) -> list[float]:
        """Run one iteration; its (embed, layers, head) segment times in ms."""
        ...


class PointLayout(Protocol):
    """How a point's iteration is laid out in memory and run (``name`` goes in the
    fingerprint as ``kv_layout``). The profiler's own is :class:`ContiguousLayout`;
    the torch executor adds its paged one from ``servecal.sched`` (the profiler does
    not import the scheduler: the CLI hands it in)."""

    name: ClassVar[str]
    #: Untimed iterations of a point run just before each timed one when a block
    #: interleaves several points, so that the timed one starts with the caches
    #: its own previous iteration left (as online, where an iteration follows one
    #: much like it) rather than another point's.
    preroll: ClassVar[int]

    def prepare(self, model: Transformer, point: Point) -> PreparedPoint:
        """Allocate ``point``'s KV and inputs (out-of-memory errors propagate)."""
        ...


@dataclass
class ContiguousPoint:
    """:func:`point_batch`'s batch, re-timed as it is (every repeat the same iteration)."""

    model: Transformer
    batch: IterationBatch
    tokens: torch.Tensor

    def time(self, clock: CpuClock | CudaClock) -> list[float]:
        return timed_iteration(self.model, self.batch, self.tokens, clock)


class ContiguousLayout:
    """One contiguous KV pool per group, every decode at ``ctx`` (the profiler's layout)."""

    name: ClassVar[str] = "contiguous"
    # 0: the profiler's tables stay as they were calibrated so far. Interleaved
    # points then start cold: a 1-decode point reads up to ~9% slower on a CPU than
    # the same iteration run back to back (``benchmarks/interleave_cost.py``).
    preroll: ClassVar[int] = 0

    def prepare(self, model: Transformer, point: Point) -> ContiguousPoint:
        return ContiguousPoint(model, *point_batch(model, point))


@dataclass
class _Live:
    """A point being measured: its prepared iteration and rows so far."""

    point: Point
    prepared: PreparedPoint
    rows: list[dict[str, Any]]


def _guard(model: Transformer, fn: Any, *args: Any) -> Any:
    """Run ``fn``; turn an out-of-memory error into :class:`PointInfeasible`."""
    try:
        return fn(*args)
    except (RuntimeError, MemoryError) as exc:
        if not is_out_of_memory(exc):
            raise
        if model.device.type == "cuda":
            torch.cuda.empty_cache()
        raise PointInfeasible(f"out of memory: {str(exc).splitlines()[0][:200]}") from None


def measure_block(
    model: Transformer,
    points: list[Point],
    scale: LayerScale,
    cfg: MeasureConfig,
    clock: CpuClock | CudaClock,
    meter: EnergyMeter | None,
    rng: np.random.Generator,
    should_stop: Callable[[], bool] = lambda: False,
    layout: PointLayout | None = None,
) -> list[list[dict[str, Any]] | PointInfeasible | None]:
    """Rows (samples-contract columns, one per repeat) or the reason, for each point.

    The repeats of a block's points are interleaved: ``repeats`` rounds, each timing
    every live point once in a fresh random order. A burst of load from elsewhere
    on the host then spreads over all points of the block instead of shifting one
    point's median, and slow drifts do not line up with the repeat index.
    ``should_stop`` is polled between rounds; when it says so, the block is
    abandoned and its unfinished points come back as ``None`` (measure them again).
    ``layout`` prepares and runs each point (default :class:`ContiguousLayout`).
    """
    layout = layout or ContiguousLayout()
    results, live = _prepare(model, points, layout, cfg.warmup, clock)
    for rep in range(cfg.repeats):
        if should_stop():  # abandon the block: unfinished points are not results
            return [r if isinstance(r, PointInfeasible) else None for r in results]
        preroll = layout.preroll if len(live) > 1 else 0
        order = [list(live)[j] for j in rng.permutation(len(live))]
        for i in order:
            failed = _time_once(model, live[i], rep, preroll, scale, clock)
            if failed is not None:
                results[i] = failed
                del live[i]
    for i, lp in live.items():
        energy_j, state = None, {}
        if meter is not None:
            energy_j, state = _energy(lp, cfg, clock, meter)
        for row in lp.rows:
            row["energy_j"] = energy_j
            row.update(state)
        results[i] = lp.rows
    return results


def _prepare(
    model: Transformer,
    points: list[Point],
    layout: PointLayout,
    warmup: int,
    clock: CpuClock | CudaClock,
) -> tuple[list[list[dict[str, Any]] | PointInfeasible | None], dict[int, _Live]]:
    """Lay out and warm up every point: its (empty) result, and the points still live."""
    results: list[list[dict[str, Any]] | PointInfeasible | None] = []
    live: dict[int, _Live] = {}
    for i, point in enumerate(points):
        try:
            prepared = _guard(model, layout.prepare, model, point)
            for _ in range(warmup):
                _guard(model, prepared.time, clock)
        except PointInfeasible as exc:
            results.append(exc)
            continue
        live[i] = _Live(point, prepared, [])
        results.append([])
    return results, live


def _time_once(
    model: Transformer,
    lp: _Live,
    rep: int,
    preroll: int,
    scale: LayerScale,
    clock: CpuClock | CudaClock,
) -> PointInfeasible | None:
    """Time repeat ``rep`` of a live point into its rows (after ``preroll`` untimed
    runs); the reason when it turns out infeasible."""
    try:
        for _ in range(preroll):
            _guard(model, lp.prepared.time, clock)
        segments = _guard(model, lp.prepared.time, clock)
    except PointInfeasible as exc:
        return exc
    row = {**_point_columns(lp.point), "ms": scale.estimate(segments), "rep": rep}
    row["ts"] = time.time()
    lp.rows.append(row)
    return None


def _energy(
    lp: _Live,
    cfg: MeasureConfig,
    clock: CpuClock | CudaClock,
    meter: EnergyMeter,
) -> tuple[float | None, dict[str, Any]]:
    """Joules per iteration from a group of back-to-back iterations, and device state."""
    e0 = meter.read_j()
    t0 = time.perf_counter()
    count, measured_ms = 0, 0.0
    while count == 0 or time.perf_counter() - t0 < cfg.energy_window_s:
        measured_ms += sum(lp.prepared.time(clock))
        count += 1
    used_j = meter.read_j() - e0
    state = meter.device_state()
    if used_j <= 0:  # a counter that did not move says nothing (not "zero energy")
        return None, state
    estimated_ms = sum(r["ms"] for r in lp.rows) / len(lp.rows)
    return used_j / count * estimated_ms / (measured_ms / count), state


def _point_columns(point: Point) -> dict[str, int]:
    return {
        "n_decode": point.n_decode,
        "chunk": point.chunk,
        "ctx": point.ctx,
        "prefix": point.prefix,
    }
