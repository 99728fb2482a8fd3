"""Half-spaces of the grid tested on their pooled rows: power for a drift on part of it.

The per-point tests (:mod:`~servecal.costmodels.drift.pointwise`) need each point's
own repeats to reject; on a loaded host (σ ≈ 0.4 in log time within a point) no point
can show a 15% shift alone. A drift usually covers a whole side of the grid (every
prefill of 64 tokens or more, every batch of 32 decodes or more): here each
*half-space* ``axis ≥ v`` or ``axis ≤ v`` (``v`` a value of the table's grid, so the
family is fixed before any time is looked at) is one sign test of all its rows
pooled: under the null (every point's true median within ``×(1 ± s)`` of the table's
P50, ``s`` = ``point_shift``, ±10% as for the point tests: a fitted table's own error
reaches 5-13% between its grid values, and at ±5% a half-space of such points pooled
called it drift in 3.3% of sets, measured) each row lies beyond ``log(1 + s)`` with probability ≤ ½,
independently of the other rows (the repeats are interleaved in time, the premise
the point tests make too), so ``P(Binomial(rows, ½) ≥ above)`` bounds the count
whatever the noise. Half-spaces with the same points are one test. Bonferroni over
the ``2 × half-spaces`` tests at :attr:`GateConfig.alpha_scan`.

A half-space that the family cannot confirm but whose test alone would reject at the
whole bound (``p ≤ false_alarm``) is *suggestive*: the gate says ``undecided``
("measure more"), never ``valid``, beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from servecal.costmodels.drift.pointwise import sign_p_values

AXES = ("n_decode", "chunk", "ctx", "prefix")


@dataclass(frozen=True)
class HalfSpaces:
    """The candidate regions: a name each, and which clusters each holds."""

    names: tuple[str, ...]
    member: np.ndarray  # (half-spaces, clusters) bool

    @classmethod
    def of(cls, coords: dict[str, np.ndarray], cuts: dict[str, Any] | None = None) -> HalfSpaces:
        """Every nontrivial ``axis ≥ v`` and ``axis ≤ v`` over the clusters' coordinates
        (``coords``: axis → one value per cluster); ``v`` runs over ``cuts[axis]`` (the
        table's grid) or, without, the values seen. Duplicates (same clusters) dropped."""
        names: list[str] = []
        masks: list[np.ndarray] = []
        seen: set[bytes] = set()
        for axis, x in coords.items():
            values = np.unique(x) if not cuts or axis not in cuts else np.asarray(cuts[axis])
            for v in values:
                for name, mask in ((f"{axis} {v:g}+", x >= v), (f"{axis} ≤{v:g}", x <= v)):
                    key = np.packbits(mask).tobytes()
                    if mask.all() or not mask.any() or key in seen:
                        continue
                    seen.add(key)
                    names.append(name)
                    masks.append(mask)
        member = np.array(masks, dtype=bool).reshape(len(masks), -1)
        return cls(tuple(names), member)

    @property
    def size(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class RegionScan:
    """Per half-space: pooled rows and counts beyond the tolerance, and the tests."""

    spaces: HalfSpaces
    rows: np.ndarray
    up: np.ndarray
    down: np.ndarray
    alpha: float
    whole: float  # the call's whole bound: a test alone at it is suggestive

    @classmethod
    def of(cls, spaces: HalfSpaces, rows, above, below, alpha: float, whole: float):  # noqa: ANN001, ANN206
        """``rows``, ``above``, ``below``: per cluster (counts beyond ``±point_shift``)."""
        m = spaces.member.astype(np.int64)
        return cls(spaces, m @ rows, m @ above, m @ below, alpha, whole)

    @property
    def level(self) -> float:
        """Bonferroni level of one of the ``2 × half-spaces`` tests."""
        return self.alpha / max(2 * self.spaces.size, 1)

    @property
    def p_values(self) -> tuple[np.ndarray, np.ndarray]:
        return sign_p_values(self.up, self.rows), sign_p_values(self.down, self.rows)

    @property
    def rejects(self) -> bool:
        return self.spaces.size > 0 and self._best()[0] <= self.level

    def suggestive(self) -> str | None:
        """The best half-space when it would reject alone at the whole bound but the
        family does not: what the gate names when it says ``undecided``."""
        p, direction, i = self._best()
        if self.spaces.size == 0 or self.rejects or p > self.whole:
            return None
        return (
            f"a {direction} of half-space {self.spaces.names[i]} ({int(self.rows[i])} rows pooled, "
            f"p = {p:.2g} alone; the family needs p <= {self.level:.2g})"
        )

    def rejects_without(self, cluster: np.ndarray, kind: np.ndarray) -> np.ndarray:
        """Per (cluster, kind of row) pair: whether any test still rejects once one row of
        that kind (bit 16: above, bit 8: below ``±point_shift``) leaves that cluster."""
        if self.spaces.size == 0:
            return np.zeros(len(cluster), dtype=bool)
        inside = self.spaces.member[:, cluster].T.astype(np.int64)  # (pairs, half-spaces)
        rows = self.rows - inside
        up = self.up - inside * (np.asarray(kind)[:, None] >> 4 & 1)
        down = self.down - inside * (np.asarray(kind)[:, None] >> 3 & 1)
        p = np.minimum(sign_p_values(up, rows), sign_p_values(down, rows))
        return (p <= self.level).any(axis=1)

    def _best(self) -> tuple[float, str, int]:
        """The smallest p-value, its direction and half-space."""
        if self.spaces.size == 0:
            return 1.0, "slowdown", 0
        p_up, p_down = self.p_values
        i, j = int(np.argmin(p_up)), int(np.argmin(p_down))
        if p_up[i] <= p_down[j]:
            return float(p_up[i]), "slowdown", i
        return float(p_down[j]), "speedup", j

    def describe(self) -> list[dict[str, Any]]:
        """Two rows of the test list: per direction, the best half-space and its p."""
        out = []
        for name, p in zip(("slowdown", "speedup"), self.p_values, strict=True):
            i = int(np.argmin(p)) if p.size else 0
            best = float(p[i]) if p.size else 1.0
            hits = [self.spaces.names[k] for k in np.flatnonzero(p <= self.level)]
            out.append(
                {"test": name, "scope": "half-spaces", "points": self.spaces.size,
                 "region": self.spaces.names[i] if p.size else None,
                 "rows": int(self.rows[i]) if p.size else 0, "p_value": best,
                 "critical": self.level, "alpha": self.alpha,
                 "method": "sign test on pooled rows, Bonferroni",
                 "rejected": bool(p.size) and best <= self.level,
                 "rejected_regions": hits}
            )  # fmt: skip
        return out

    def found(self, cluster_median: np.ndarray) -> list[dict[str, Any]]:
        """Per direction, the rejecting half-space with the smallest p as the drifted
        region (the others are listed in the test's ``rejected_regions``)."""
        out = []
        for direction, p in zip(("slowdown", "speedup"), self.p_values, strict=True):
            i = int(np.argmin(p)) if p.size else 0
            if not p.size or p[i] > self.level:
                continue
            mask = self.spaces.member[i]
            out.append(
                {"region": f"{direction} in half-space {self.spaces.names[i]}",
                 "axis": "half-space", "status": "drift", "direction": direction,
                 "range": None, "points": int(mask.sum()), "rows": int(self.rows[i]),
                 "factor": math.exp(float(np.median(cluster_median[mask]))),
                 "coverage": None, "p_value": float(p[i]), "mask": mask}
            )  # fmt: skip
        return out
