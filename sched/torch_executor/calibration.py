"""Calibrating the torch executor's own forward pass: the ``paged`` KV layout.

``servecal calibrate --kv-layout paged`` times each design point the way
:class:`~servecal.sched.torch_executor.executor.TorchExecutor` runs an iteration:
KV in a :class:`~.pool.PagedKVPool`, the pass a :class:`~.forward.ForwardRun` over a
:class:`~.forward.PagedBatch`. The profiler's contiguous layout re-times one
iteration of ``n`` decodes all at ``ctx``; an online decode group differs in ways
that cost time, and a table measured on it predicted the executor's iterations
8–14 % short on a quiet host. Here a point is a small, moving decode group:

* *ragged lengths*: ``n`` requests spread evenly over ``ctx × (1 ± spread)``
  (mean ``ctx``, the value the engine queries with), sorted longest first as the
  executor orders them, so the length buckets and their masks are the executor's;
* *steady decoding*: every repeat commits one token per request, so the decode
  views are appended to as online; the lengths start ``cycle / 2`` below their
  targets and the group is rebuilt at the start lengths every ``cycle`` steps,
  so the mean context over a point's repeats stays ``ctx``;
* *group changes*: every ``change_every`` (11) steps one request (in turn) leaves
  and a newcomer at its length joins, so the next pass rebuilds the views (rows
  carried, the newcomer gathered). With the runner's pre-roll (below) every other
  step is timed and an odd ``change_every`` puts every other change on a timed
  step, so 1 in 11 timed iterations follows a change, as without the pre-roll;
  online, 4–9 % of decode iterations do.

The layout asks the runner for one untimed iteration before each timed one when
points are interleaved (``preroll``): online an iteration follows one much like
it, while in an interleaved block it would follow another point's and start with
cold caches (a 1-decode iteration 9 % slower on a CPU).

A prefill chunk runs after its ``prefix`` in the pool on every repeat, as the
contiguous layout does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from servecal.profiler.design import Point
from servecal.profiler.model import Transformer
from servecal.profiler.timing import CpuClock, CudaClock, LayerScale
from servecal.sched.torch_executor.forward import DECODE_VIEW_SLACK, ForwardRun, PagedBatch
from servecal.sched.torch_executor.pool import PagedKVPool, PoolConfig

#: The prefilling request's id (decoders are numbered from 0, newcomers upwards).
PREFILL_RID = -2


def ragged_lengths(n: int, ctx: int, spread: float) -> list[int]:
    """``n`` cached lengths evenly over ``ctx × (1 ± spread)``, longest first (mean ≈ ctx)."""
    if n == 1:
        return [ctx]
    low, high = ctx * (1 - spread), ctx * (1 + spread)
    return sorted((round(low + (high - low) * i / (n - 1)) for i in range(n)), reverse=True)


@dataclass
class PagedPoint:
    """One design point on a paged pool, one decode step further per :meth:`time`."""

    model: Transformer
    point: Point
    layout: PagedLayout
    pool: PagedKVPool = field(init=False)
    rids: list[int] = field(init=False, default_factory=list)
    lengths: list[int] = field(init=False, default_factory=list)
    tokens: torch.Tensor = field(init=False)
    steps: int = field(init=False, default=0)
    _next_rid: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        model, point, layout = self.model, self.point, self.layout
        start = self._start_lengths()
        reach = sum(start) + len(start) * (layout.cycle + 1) + point.prefix + point.chunk
        config = PoolConfig(reach, layout.block_size, max_seqs=2 * point.n_decode + 2)
        self.pool = PagedKVPool(model.shape, len(model.layers), config, model.device, model.dtype)
        if start:  # a long run's view buffers have long reached their size
            widest = -(-(max(start) + layout.cycle + 1) // layout.block_size) * layout.block_size
            self.pool.presize_views(len(start), widest + DECODE_VIEW_SLACK)
        self._start_group()
        if point.chunk:
            self.pool.reserve(PREFILL_RID, point.prefix + point.chunk)
            self.pool.commit(PREFILL_RID, point.prefix)
        gen = torch.Generator(device=model.device).manual_seed(point.n_decode * 7919 + point.chunk)
        n_tokens = point.n_decode + point.chunk
        self.tokens = torch.randint(
            0, model.shape.vocab, (n_tokens,), device=model.device, generator=gen
        )

    def _start_lengths(self) -> list[int]:
        n = self.point.n_decode
        if n == 0:
            return []
        lengths = ragged_lengths(n, self.point.ctx, self.layout.spread)
        return [max(0, length - self.layout.cycle // 2) for length in lengths]

    def _join(self, length: int) -> int:
        rid, self._next_rid = self._next_rid, self._next_rid + 1
        self.pool.reserve(rid, length + 1)
        self.pool.commit(rid, length)
        return rid

    def _start_group(self) -> None:
        for rid in self.rids:
            self.pool.free(rid)
        self.lengths = self._start_lengths()
        self.rids = [self._join(length) for length in self.lengths]

    def time(self, clock: CpuClock | CudaClock) -> list[float]:
        """Run one iteration (timed like the executor's), then move the group on."""
        point = self.point
        prefills = [(PREFILL_RID, point.prefix, point.chunk)] if point.chunk else []
        batch = PagedBatch(self.pool, list(self.rids), list(self.lengths), prefills, self.tokens)
        run = ForwardRun(self.model, batch, clock, LayerScale(1, 1))
        run.run()
        self._advance()
        return run.segments

    def _advance(self) -> None:
        layout = self.layout
        self.steps += 1
        if not self.rids:
            return
        if self.steps % layout.cycle == 0:  # back to the start lengths: mean ctx kept
            self._start_group()
            return
        self.lengths = [length + 1 for length in self.lengths]
        for rid, length in zip(self.rids, self.lengths, strict=True):
            self.pool.commit(rid, length)
            self.pool.reserve(rid, length + 1)
        if self.steps % layout.change_every == 0:  # one leaves, a newcomer takes its place
            k = (self.steps // layout.change_every) % len(self.rids)
            self.pool.free(self.rids[k])
            self.rids[k] = self._join(self.lengths[k])


@dataclass(frozen=True)
class PagedLayout:
    """The torch executor's KV layout for ``servecal calibrate`` (see module doc)."""

    name: ClassVar[str] = "paged"
    preroll: ClassVar[int] = 1  # online, an iteration follows one much like it
    block_size: int = 16
    spread: float = 0.5
    change_every: int = 11
    cycle: int = 64

    def __post_init__(self) -> None:
        if not 0.0 <= self.spread < 1.0:
            raise ValueError(f"spread must be in [0, 1), got {self.spread}")
        if self.change_every < 1 or self.cycle < 2:
            raise ValueError("change_every must be >= 1 and cycle >= 2")

    def prepare(self, model: Transformer, point: Point) -> PagedPoint:
        return PagedPoint(model, point, self)
