"""The running mean the margin controllers learn the table's error with: a plain mean
over its first :data:`WARMUP` values, so that a few iterations already give an
estimate, then exponential with weight ``1 / WARMUP``, so that it follows a table
whose error changes (an effective memory of :data:`WARMUP` iterations)."""

from __future__ import annotations

from dataclasses import dataclass

#: Values a mean is a plain mean over before it turns exponential.
WARMUP = 20
#: Weight of each new value after that.
WEIGHT = 1.0 / WARMUP


@dataclass
class RunningMean:
    """``value`` after ``n`` values (:meth:`add`)."""

    value: float = 0.0
    n: int = 0

    def add(self, x: float) -> None:
        self.n += 1
        self.value += (x - self.value) * max(WEIGHT, 1.0 / self.n)
