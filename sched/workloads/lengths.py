"""Token-length distributions a workload draws prompts and outputs from.

Two shapes cover the workloads: a clipped log-normal (fitted to a trace's median
and log-spread) and a piecewise-linear inverse CDF through measured quantiles
(sampling a trace's marginal without shipping the trace). Both are frozen data so
that a workload's every number is visible in one place (docs/workloads.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LogNormalLengths:
    """``round(median · exp(sigma · Z))`` clipped to ``[lo, hi]``, Z standard normal."""

    median: float
    sigma: float
    lo: int = 1
    hi: int = 1_000_000

    def __post_init__(self) -> None:
        if not (self.median > 0 and math.isfinite(self.median)):
            raise ValueError(f"median must be a positive number, got {self.median}")
        if not (self.sigma >= 0 and math.isfinite(self.sigma)):
            raise ValueError(f"sigma must be >= 0, got {self.sigma}")
        if not 1 <= self.lo <= self.hi:
            raise ValueError(f"need 1 <= lo <= hi, got lo={self.lo} hi={self.hi}")

    @property
    def mean(self) -> float:
        """Mean of the unclipped log-normal (for documentation and sanity checks)."""
        return self.median * math.exp(self.sigma**2 / 2)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` integer lengths."""
        x = self.median * np.exp(self.sigma * rng.standard_normal(n))
        return np.clip(np.rint(x), self.lo, self.hi).astype(np.int64)


@dataclass(frozen=True)
class QuantileLengths:
    """Lengths drawn through a piecewise-linear inverse CDF.

    ``probs`` run from 0 to 1 (strictly increasing) and ``values`` are the measured
    quantiles at those probabilities (non-decreasing), so ``values[0]`` and
    ``values[-1]`` are the smallest and largest lengths ever drawn.
    """

    probs: tuple[float, ...]
    values: tuple[int, ...]

    def __post_init__(self) -> None:
        p = np.asarray(self.probs, dtype=float)
        v = np.asarray(self.values, dtype=float)
        if p.size < 2 or p.size != v.size:
            raise ValueError("probs and values need the same length, at least 2")
        if p[0] != 0.0 or p[-1] != 1.0 or np.any(np.diff(p) <= 0):
            raise ValueError("probs must increase strictly from 0 to 1")
        if v[0] < 1 or np.any(np.diff(v) < 0):
            raise ValueError("values must be >= 1 and non-decreasing")

    @property
    def median(self) -> float:
        return float(np.interp(0.5, self.probs, self.values))

    @property
    def lo(self) -> int:
        return int(self.values[0])

    @property
    def hi(self) -> int:
        return int(self.values[-1])

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` integer lengths."""
        x = np.interp(rng.random(n), self.probs, self.values)
        return np.clip(np.rint(x), self.lo, self.hi).astype(np.int64)


@dataclass(frozen=True)
class FixedLengths:
    """Every request gets the same length (toy workloads and tests)."""

    value: int

    def __post_init__(self) -> None:
        if self.value < 1:
            raise ValueError(f"length must be >= 1, got {self.value}")

    @property
    def median(self) -> float:
        return float(self.value)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)


LengthDist = LogNormalLengths | QuantileLengths | FixedLengths
