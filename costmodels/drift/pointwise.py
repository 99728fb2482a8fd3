"""Each grid point tested on its own repeats: the gate's view of a drift on a few points.

The family's vote tests (:mod:`servecal.costmodels.drift.gate`) count grid points
past the tolerance across the whole grid or a fixed band; a drift on part of a band
(every point with chunk ≥ 64 of a 16-128 grid) dilutes them. Here each point is a
sign test of its own rows: under the null (the point's true median within
``×(1 ± s)`` of the table's P50) a row lies beyond ``log(1 + s)`` with probability
≤ ½, so ``P(Binomial(rows, ½) ≥ above)`` bounds the chance of its count, whatever the
noise shape; the same for ``below`` and a speed-up.

Multiple testing: the ``2 × points`` tests (slowdown and speedup per point) share
:attr:`GateConfig.alpha_points` with Holm's step-down procedure, which bounds the
family-wise error under any dependence between points. Whether *any* point rejects is
Holm's first step, ``min p ≤ α / m`` (Bonferroni): what the verdict and its exact
single-row stability check use; Holm's later steps only add rejected points to report.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy import stats


def sign_p_values(count: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``P(Binomial(rows, ½) ≥ count)`` per point (1 where ``count`` is 0)."""
    count, rows = np.asarray(count), np.asarray(rows)
    return np.where(count > 0, stats.binom.sf(count - 1, rows, 0.5), 1.0)


def holm(p: np.ndarray, alpha: float) -> np.ndarray:
    """Which hypotheses Holm's step-down procedure rejects at family-wise level ``alpha``."""
    p = np.asarray(p, dtype=float)
    m = p.size
    order = np.argsort(p, kind="stable")
    level = alpha / (m - np.arange(m))  # alpha / m, alpha / (m - 1), ...
    passed = p[order] <= level
    k = m if passed.all() else int(np.argmin(passed))  # first failure stops the steps
    out = np.zeros(m, dtype=bool)
    out[order[:k]] = True
    return out


@dataclass(frozen=True)
class PointTests:
    """Per point: the slowdown and speedup p-values, and Holm's rejections."""

    p_up: np.ndarray
    p_down: np.ndarray
    alpha: float

    @classmethod
    def of(cls, rows: np.ndarray, above: np.ndarray, below: np.ndarray, alpha: float):
        return cls(sign_p_values(above, rows), sign_p_values(below, rows), alpha)

    @property
    def size(self) -> int:
        return int(self.p_up.size)

    @property
    def level(self) -> float:
        """Holm's first step: the Bonferroni level of one of the ``2 × points`` tests."""
        return self.alpha / (2 * self.size)

    @property
    def rejects(self) -> bool:
        """Whether any point rejects (Holm rejects anything iff its first step does)."""
        return self.size > 0 and float(min(self.p_up.min(), self.p_down.min())) <= self.level

    def rejected(self) -> tuple[np.ndarray, np.ndarray]:
        """Points Holm rejects as slowed, and as sped up."""
        both = holm(np.concatenate([self.p_up, self.p_down]), self.alpha)
        return both[: self.size], both[self.size :]

    def rejects_without(self, point: int, p_up: float, p_down: float, gone: bool) -> bool:
        """Whether any point rejects once one row of ``point`` is removed: its p-values
        become ``p_up``/``p_down`` (or it goes, ``gone``, and with it two tests)."""
        points = self.size - int(gone)
        if points <= 0:
            return False
        level = self.alpha / (2 * points)
        first, second = self._two_smallest
        others = second if first[1] == point else first
        if others[0] <= level:
            return True
        return not gone and min(p_up, p_down) <= level

    @cached_property
    def _two_smallest(self) -> tuple[tuple[float, int], tuple[float, int]]:
        """(p, point) of the two points with the smallest p-values (either direction)."""
        mine = np.minimum(self.p_up, self.p_down)
        order = np.argsort(mine, kind="stable")[:2]
        pairs = [(float(mine[i]), int(i)) for i in order] + [(np.inf, -1)] * 2
        return pairs[0], pairs[1]
