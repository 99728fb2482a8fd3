"""A decode batch past a cost step the table cannot see: learned online, and not grown into.

A calibration grid prices ``n`` decodes by interpolating between the few batch sizes it
measured; a device — or a nearest-point replay of that grid — can step between them.
A replay of a grid with 16 and 128 decodes as neighbours prices 46 decodes at 128's
cost: at 3,000 tokens of context a decode-only step goes from 4 ms to 24.5 ms, the
whole of a 25 ms TPOT, while the table, smooth, says 5.4 ms. No chunk avoids that
step: once the batch is past it every iteration costs it. What sets the batch is how
fast prompts are completed (each completed prompt adds a decode until its output
ends), and SLOWeave, filling each iteration to the deadline, completes them fastest;
a fixed chunk that happens to complete them slower never reaches the step
(docs/results/2026-12-05-decode-cliff.md).

:class:`DecodeCliff` keeps the last :data:`KEPT` values of ``log g`` per exact decode
count ``n`` (``g`` = an iteration's duration ÷ the table's median for it, clipped as
the region biases are), from the iterations the margin controller counts; a batch
size counts once it has :data:`MIN_SEEN` of them, and its bias ``m_n`` is their
median (a stall among a size's few iterations does not move it; a mean did, and held
a batch on a truth with 3% stalls). A *cliff* at a counted size ``j`` is a jump in
that bias between neighbouring batch sizes: the mean of ``m_n`` over ``j`` and the
next :data:`WINDOW` − 1 counted sizes exceeds the mean over the :data:`WINDOW`
counted sizes below ``j`` by ``log(CLIFF_GAIN)`` or more. (Counted
sizes, not ``j − 3 … j − 1``: a growing batch passes each size in an iteration or two,
so the sizes just below a step are often seen too rarely.) A cliff *binds* unless a
larger batch repays it: some larger batch it has seen, or ``2j``, ``4j``, ``8j``
priced at the table's median × the bias above the cliff, decodes at least as many
tokens a millisecond as the largest counted batch below it does.
(A grid whose 1 and 16 decodes are neighbours steps at 5 decodes too, but 16 decodes
cost what 5 do: that cliff is repaid and the batch grows through it.)

:meth:`DecodeCliff.holds` says whether a batch of ``n_after`` decodes lies at or past a
binding cliff; SLOWeave then leaves the prompt it would complete one token short
(:func:`~servecal.sched.policies.sloweave.controlled_chunk`), so that the batch grows
again only as decodes finish. On a truth whose cost per decode never jumps by
``CLIFF_GAIN`` between neighbouring batch sizes nothing binds and nothing changes.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median

#: The jump in the table's error between neighbouring batch sizes that makes a cliff
#: (0.41 in ``log g``): well above what jitter moves the mean of 3 sizes' medians (σ
#: 10%: < 0.15; a stall does not move a median), well below a grid's step (the coarse
#: replays': 0.8-1.4).
CLIFF_GAIN = 1.5
#: Counted batch sizes on each side of a cliff whose biases are averaged.
WINDOW = 3
#: Iterations a batch size needs before its bias counts: few, because a binding cliff
#: is visited rarely — every visit is a TPOT miss.
MIN_SEEN = 3

#: Iterations kept per decode count (its bias is their median).
KEPT = 20
#: Counted iterations after which the lowest binding cliff is found again though no
#: batch size has newly become counted (the sizes' biases have moved).
REFRESH = 64

#: ``decode_ms(n)``: the table's median for ``n`` decodes alone at the decision's context.
DecodeCost = Callable[[int], float]


@dataclass
class DecodeCliff:
    """The table's bias per exact decode count, and the cliffs in it (module docstring).

    ``add(n_decode, log_g)`` after each counted iteration; ``holds(n_after, decode_ms)``
    before completing a prompt. The lowest binding cliff is found again only when a
    batch size has just become counted or :data:`REFRESH` iterations have been added
    since (a completed prompt asks every time; a scan of every size each time cost a
    run on a right table 2.7× its time).
    """

    #: the last :data:`KEPT` values of ``log g`` per decode count
    by_n: dict[int, deque[float]] = field(default_factory=dict)
    #: the lowest binding cliff as last found (``None``: none); ``stale``: find it again
    cap: int | None = None
    stale: bool = True
    added: int = 0

    def add(self, n_decode: int, log_g: float) -> None:
        """An iteration with ``n_decode`` decodes took ``exp(log_g)`` × the table's median."""
        kept = self.by_n.get(n_decode)
        if kept is None:
            kept = self.by_n[n_decode] = deque(maxlen=KEPT)
        kept.append(log_g)
        self.added += 1
        if len(kept) == MIN_SEEN or self.added >= REFRESH:
            self.stale = True

    def holds(self, n_after: int, decode_ms: DecodeCost) -> bool:
        """True when a batch of ``n_after`` decodes lies at or past a binding cliff
        (``decode_ms``: the table at the asking decision's context, which prices the
        repay test when the cliff is found again)."""
        if self.stale:
            self.cap = self._lowest_binding(decode_ms)
            self.stale, self.added = False, 0
        return self.cap is not None and n_after >= self.cap

    def _lowest_binding(self, decode_ms: DecodeCost) -> int | None:
        """The smallest counted batch size at which a binding cliff starts."""
        seen = sorted(self._biases())
        jump = math.log(CLIFF_GAIN)
        for i in range(1, len(seen)):
            j = seen[i][0]
            below = _mean_bias(seen[max(0, i - WINDOW) : i])
            above = _mean_bias(seen[i : i + WINDOW])
            base = seen[i - 1][0]  # the largest batch seen below the jump
            if above - below >= jump and not _repaid(seen, base, j, below, above, decode_ms):
                return j
        return None

    def _biases(self) -> list[tuple[int, float]]:
        """``(decode count, bias)`` of every counted size: the median of its kept
        ``log g`` (a stall among a size's few iterations does not move it)."""
        return [(n, median(kept)) for n, kept in self.by_n.items() if len(kept) >= MIN_SEEN]


def _repaid(
    seen: list[tuple[int, float]], base: int, j: int, below: float, above: float,
    decode_ms: DecodeCost,
) -> bool:  # fmt: skip
    """Whether some batch of ``j`` decodes or more decodes as many tokens a millisecond
    as ``base`` decodes below the cliff: one ``seen`` (``(size, bias)``), or
    ``2j``/``4j``/``8j`` by the table with the bias above the cliff."""

    def rate(n: int, log_g: float) -> float:  # decodes a millisecond
        cost = decode_ms(n) * math.exp(log_g)
        return n / cost if cost > 0 else math.inf

    below_rate = rate(base, below)
    larger = (rate(n, bias) >= below_rate for n, bias in seen if n >= j)
    return any(larger) or any(rate(n, above) >= below_rate for n in (2 * j, 4 * j, 8 * j))


def _mean_bias(sizes: list[tuple[int, float]]) -> float:
    """The mean of ``(batch size, bias)`` pairs' biases."""
    return sum(bias for _, bias in sizes) / len(sizes)
