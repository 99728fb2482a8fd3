"""Reading operator times between (and just beyond) the sizes a profile measured.

Between profiled sizes: piecewise-linear. Beyond the largest: proportional to the
size (``t(x) = t(x_max) · x / x_max``), which is how bandwidth- or compute-bound
kernels scale once launch overhead is amortised. Below the smallest: the
smallest's time (launch overhead dominates there). Every read beyond the range is
counted so the importer can say how many rows rest on extrapolation.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

#: A profiled point above this multiple of its neighbours' line is a glitch (dropped).
SPIKE_FACTOR = 2.0


@dataclass
class Series:
    """Times ``ys`` at sorted distinct sizes ``xs`` (duplicate sizes: their median)."""

    xs: list[float]
    ys: list[float]

    @classmethod
    def from_pairs(cls, xs: Sequence[float], ys: Sequence[float]) -> Series:
        by_x: dict[float, list[float]] = {}
        for x, y in zip(xs, ys, strict=True):
            by_x.setdefault(float(x), []).append(float(y))
        keys = sorted(by_x)
        return cls(keys, [_median(by_x[k]) for k in keys])

    def without_spikes(self, factor: float = SPIKE_FACTOR) -> tuple[Series, int]:
        """This series less its isolated spikes, and how many were dropped.

        A profiled point more than ``factor`` × the line through its two neighbours is a
        measurement glitch (aiconfigurator's H100 tables time a 4,096 × 5,120 × 6,144
        GEMM at 1.41 ms between 0.16 ms at half the rows and 0.68 ms at twice them); a
        read near it would price a step several times too high. Ends are kept."""
        xs, ys = list(self.xs), list(self.ys)
        keep = [True] * len(xs)
        for i in range(1, len(xs) - 1):
            x0, x1, y0, y1 = xs[i - 1], xs[i + 1], ys[i - 1], ys[i + 1]
            line = y0 + (y1 - y0) * (xs[i] - x0) / (x1 - x0)
            keep[i] = ys[i] <= factor * line
        pairs = [(x, y) for x, y, k in zip(xs, ys, keep, strict=True) if k]
        kept = Series([x for x, _ in pairs], [y for _, y in pairs])
        return kept, keep.count(False)

    def at(self, x: float, log: ExtrapolationLog | None = None) -> float:
        xs, ys = self.xs, self.ys
        if x <= xs[0]:
            return ys[0]
        if x >= xs[-1]:
            if x > xs[-1] and log is not None:
                log.count += 1
            return ys[-1] * x / xs[-1]
        i = bisect.bisect_right(xs, x)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def bracket(values: Sequence[float], x: float) -> tuple[float, float, float]:
    """``(lo, hi, weight of hi)`` around ``x`` in sorted ``values`` (ends: clamped, no weight)."""
    if x <= values[0]:
        return values[0], values[0], 0.0
    if x >= values[-1]:
        return values[-1], values[-1], 0.0
    i = bisect.bisect_right(values, x)
    lo, hi = values[i - 1], values[i]
    return lo, hi, (x - lo) / (hi - lo)


def _median(v: list[float]) -> float:
    s = sorted(v)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


@dataclass
class ExtrapolationLog:
    """How many reads fell beyond the profiled range."""

    count: int = 0
    notes: set[str] = field(default_factory=set)
