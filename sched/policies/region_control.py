"""SLOWeave's budget scale corrected per region: a table wrong in a structured way.

A user's calibration is a grid of a few values per axis; the table interpolates
smoothly between them where the device steps. Its error is then not noise around the
P99 but a bias that depends on *where* the iteration lies: a 700-token chunk may cost
30% more than the table says while a 450-token one costs 15% less. One budget scale
for every iteration (:class:`~servecal.sched.policies.miss_control.GapMissControl`)
pays for the worst region everywhere, and cannot use the room the table wastes
elsewhere; a fixed chunk that happens to sit where the table is pessimistic wins.

:class:`RegionMissControl` splits the two things the pooled controller's scale mixes:

* the *tail* — how far past the typical cost jitter and stalls reach, which the SLO's
  affordable miss rate ``α`` must absorb — stays one adaptive-conformal scale
  ``s`` over every counted iteration, exactly as ``GapMissControl`` keeps it;
* the *bias* of the table per region — ``log2`` of the chunk × ``log2`` of the prefix
  (bucket ``b`` holds ``2^b … 2^(b+1) − 1``; the prefix's bucket is fixed within one
  decision) — is learned from each counted iteration: ``g = duration / P50`` of the
  table's own median for that iteration. The running mean ``m_r`` of ``log g`` per
  region (a plain mean for its first 20 iterations, then exponential with weight
  0.05) corrects that region's prediction: it plans at ``s · exp(−m_r)``, within
  ``[min_scale, region_max_scale]``. The same mean is kept per finer bucket, the
  region × ``log2`` of the batch's decodes × ``log2`` of their mean context, and used
  once it has :data:`FINE_MIN` iterations: a coarse grid steps in those axes too, so
  one chunk region can hold batches the table prices right and batches it prices
  2× low.

A region not yet counted plans at ``s``; where the table's median is right (a smooth
truth) ``m_r ≈ 0`` and every region plans at ``s``, as the pooled controller does. The
region's ``log g`` is clipped to ±1 (a factor 2.7) so that a stall moves its mean no
more than a badly wrong grid cell does (stalls are the tail's business, and ``s``'s).

The decision (:meth:`RegionMissControl.choose`) is the largest chunk feasible under
its own region's scale: regions are tried from the top down, the chunk restricted to
each; a region whose scale is no larger than one found infeasible above it cannot fit
either (the cost only grows with the chunk) and is skipped, so it is usually one or
two calls of the chunk search.

Then one comparison: where a coarse grid steps, the chunks just below a step cost what
the grid point below them costs and those just above it what the point above costs,
so the largest feasible chunk can prefill *fewer* tokens per millisecond than the
largest chunk of the region below it (511 tokens at a 256-token cost against 600 at a
1,024-token one). With the table's median ``P50`` corrected by each region's learned
bias (``P50(c) · exp(m_r)``: what such an iteration has cost), the region below's
largest feasible chunk is taken instead when its tokens per millisecond are
:data:`EFFICIENCY_GAIN` × the larger one's or more. On a truth the table prices right
every ``m_r ≈ 0`` and a larger chunk amortises the iteration's fixed cost better, so
the largest feasible chunk stays the choice.

The same ``log g`` is kept per exact decode count too
(:class:`~servecal.sched.policies.decode_cliff.DecodeCliff`): where it jumps between
neighbouring batch sizes and no larger batch repays the jump, :meth:`holds` tells
SLOWeave not to complete a prompt into that batch (``hold_cliffs``, on by default).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from servecal.sched.policies.decode_cliff import DecodeCliff, DecodeCost
from servecal.sched.policies.margin import Fit, Median
from servecal.sched.policies.miss_control import GapMissControl

#: Iterations a region's mean is a plain mean over before it turns exponential.
WARMUP = 20
#: Weight of each new iteration after that (an effective memory of 20 iterations).
WEIGHT = 1.0 / WARMUP
#: ``log f`` is clipped to ``±CLIP`` before it enters a mean.
CLIP = 1.0
#: Iterations a (chunk, prefix, decodes, context) bucket needs before its own mean is
#: used instead of its (chunk, prefix) region's.
FINE_MIN = WARMUP // 2
#: How much more prefill per millisecond the region below's chunk must promise to be
#: taken instead of the largest feasible one (a clear win, not the means' noise).
EFFICIENCY_GAIN = 1.1


def bucket(x: int) -> int:
    """``floor(log2(x))`` for ``x ≥ 1`` (-1 for 0)."""
    return x.bit_length() - 1


@dataclass
class _Mean:
    """A running mean: plain for :data:`WARMUP` values, then exponential."""

    value: float = 0.0
    n: int = 0

    def add(self, x: float) -> None:
        self.n += 1
        self.value += (x - self.value) * max(WEIGHT, 1.0 / self.n)


@dataclass
class RegionMissControl(GapMissControl):
    """:class:`GapMissControl` with a per-region bias correction (module docstring).

    Use as ``GapMissControl``, with ``choose(fit, limit, prefix)`` for the chunk and
    ``planned(deadline_ms, chunk, now_ms, p50_ms)`` after deciding one the budget cut
    (``p50_ms``: the table's median for it). ``region_max_scale`` (1.5) bounds a
    region's scale above; ``hold_cliffs`` (True): :meth:`holds` answers from the decode
    batch's cliffs (False: never holds).
    """

    region_max_scale: float = 1.5
    hold_cliffs: bool = True
    regions: dict[tuple[int, int], _Mean] = field(default_factory=dict)
    #: the same bias per (chunk, prefix, decodes, context) bucket: used once it has
    #: :data:`FINE_MIN` iterations, the coarser region's until then
    fine: dict[tuple[int, int, int, int], _Mean] = field(default_factory=dict)
    #: the same bias per exact decode count, for the decode batch's cliffs
    cliff: DecodeCliff = field(default_factory=DecodeCliff)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.region_max_scale >= self.max_scale:
            raise ValueError("RegionMissControl.region_max_scale must be >= max_scale")
        self._prefix_bucket = -1  # the current decision's
        self._batch = (-1, -1)  # the current decision's decodes and context buckets
        self._pending_batch = (-1, -1)
        self._n_decode = 0  # the current decision's decodes
        self._pending_n_decode = 0
        self._start = math.nan
        self._p50 = math.nan
        self._pending_region = (-1, -1)

    def _mean(self, region: int) -> _Mean | None:
        """The learned bias of chunk bucket ``region`` for the current decision: its
        fine bucket's once that has :data:`FINE_MIN` iterations, else its region's."""
        mean = self.fine.get((region, self._prefix_bucket, *self._batch))
        if mean is None or mean.n < FINE_MIN:
            mean = self.regions.get((region, self._prefix_bucket))
        return mean

    def region_scale(self, region: int) -> float:
        """The budget scale of chunk bucket ``region`` at the current prefix bucket."""
        mean = self._mean(region)
        if mean is None:
            return self._scale
        s = self._scale * math.exp(-mean.value)
        return min(max(s, self.min_scale), self.region_max_scale)

    def choose(
        self,
        fit: Fit,
        limit: int,
        prefix: int = 0,
        n_decode: int = 0,
        ctx: float = 0.0,
        median: Median | None = None,
    ) -> int:
        """The largest chunk up to ``limit`` that fits the budget under its own region's
        scale (0: none), or the region below's largest when it prefills clearly more per
        millisecond by ``median`` and the regions' biases (module docstring; without
        ``median``, always the largest); ``prefix``: the prompt's tokens already
        prefilled, ``n_decode`` and ``ctx`` the batch's decodes and their mean context."""
        self._prefix_bucket = bucket(prefix)
        self._batch = (bucket(n_decode), bucket(int(ctx)))
        self._n_decode = n_decode
        largest = self._largest(fit, limit)
        if median is None or largest <= 0:
            return largest
        return self._cheaper_below(fit, median, largest)

    def _largest(self, fit: Fit, limit: int) -> int:
        """The largest chunk up to ``limit`` feasible under its own region's scale."""
        region, top = bucket(limit), limit
        while region >= 0:
            scale = self.region_scale(region)
            c = fit(top, scale)
            if c > 0 and bucket(c) == region:
                return c
            # c < 2^region: every region between c's and this one whose scale is no
            # larger fails too (the cost only grows with the chunk)
            region = max(bucket(c), self._next_larger(region, scale))
            top = (2 << region) - 1 if region >= 0 else 0
        return 0

    def _cheaper_below(self, fit: Fit, median: Median, chunk: int) -> int:
        """``chunk``, or the largest feasible chunk of the region below it when that
        prefills :data:`EFFICIENCY_GAIN` × as many tokens a millisecond by the table's
        median corrected by each region's learned bias."""
        region = bucket(chunk)
        if region <= 0:
            return chunk
        below = fit((1 << region) - 1, self.region_scale(region - 1))
        if below <= 0:
            return chunk

        def rate(c: int) -> float:  # tokens a millisecond (a zero median: unbounded)
            mean = self._mean(bucket(c))
            cost = median(c) * math.exp(0.0 if mean is None else mean.value)
            return c / cost if cost > 0 else math.inf

        return below if rate(below) >= EFFICIENCY_GAIN * rate(chunk) else chunk

    def _next_larger(self, below: int, scale: float) -> int:
        """The highest region under ``below`` with a scale above ``scale`` (-1: none)."""
        for region in range(below - 1, -1, -1):
            if self.region_scale(region) > scale:
                return region
        return -1

    def planned(
        self, deadline_ms: float, chunk: int = 0, now_ms: float = math.nan,
        p50_ms: float = math.nan,
    ) -> None:  # fmt: skip
        """The chunk just decided (at ``now_ms``; the table's median ``p50_ms``) was cut
        by the budget to end by ``deadline_ms``; without ``chunk`` it is counted as
        ``GapMissControl`` counts it, in no region."""
        self._pending = deadline_ms
        if chunk > 0 and p50_ms > 0:
            self._pending_region = (bucket(chunk), self._prefix_bucket)
            self._pending_batch = self._batch
            self._pending_n_decode = self._n_decode
            self._start, self._p50 = now_ms, p50_ms
        else:
            self._pending_region = (-1, -1)

    def count(
        self, deadline_ms: float, chunk: int, limit: int, now_ms: float, median: Median
    ) -> None:
        """The chunk (``> 0``) just decided: every one is counted, the whole remainder
        too: it was fitted to the deadline as well, and where a coarse grid steps, short
        tails beside many decodes overshoot."""
        self.planned(deadline_ms, chunk, now_ms, median(chunk))

    def settle(self, now_ms: float) -> None:
        """Score the last counted iteration (pooled) and learn its region's bias."""
        if self._pending != self._pending:  # nan: nothing pending
            return
        key = self._pending_region
        super().settle(now_ms)
        if key[0] < 0:
            return
        self._pending_region = (-1, -1)
        took = now_ms - self._start
        if not took > 0.0:
            return
        g = min(max(math.log(took / self._p50), -CLIP), CLIP)
        self.regions.setdefault(key, _Mean()).add(g)
        self.fine.setdefault((*key, *self._pending_batch), _Mean()).add(g)
        self.cliff.add(self._pending_n_decode, g)

    def holds(self, n_after: int, decode_ms: DecodeCost) -> bool:
        """Whether completing a prompt into a batch of ``n_after`` decodes steps to or past
        a cliff of the table's error no larger batch repays (``decode_ms(n)``: the
        table's median for ``n`` decodes alone)."""
        return self.hold_cliffs and self.cliff.holds(n_after, decode_ms)

    def summary(self) -> dict[str, float | int]:
        """The pooled summary and how many regions it learned."""
        out = super().summary()
        out["regions"] = len(self.regions)
        return out
