"""A predictor whose safety margin adapts online, per region, while drift is detected.

``AdaptiveMargin(base, monitor)`` answers the Predictor protocol. Its P50/P99
are the base table's, untouched (the table is never rewritten); its margin
grows so that ``actual ≤ (1 + Q)·(P99 + δ)`` holds at rate ``1 − α`` again. In
every ``(n_decode, chunk)`` region a quantile tracker

    q ← q + η·(1[actual > (1 + q)·(P99 + δ)] − α)

follows the ``1 − α`` quantile of ``actual / (P99 + δ) − 1``: a relative
excess, so one step ``η·(P99 + δ)`` is in ms and scales with the iteration.
Unlike adaptive conformal inference run at the P99 (which inflates to infinity
after a run of misses) it settles where the miss rate is α. A region seen
fewer than ``warm`` times borrows the pooled tracker. While the monitor measures
a slow-down under way, its size is a floor under every tracker (``_lift``).
While the monitor says ``ok`` (and ``always`` is off) the base margin is used
unchanged; adapted margins only ever add (``Q ≥ 0``).

``Q`` is made non-decreasing in the chunk (running maximum over chunk buckets)
so the adapted bound stays monotone and ``max_chunk`` stays an exact search:
one base ``max_chunk`` per chunk bucket at budget ``B / (1 + Q)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from servecal.costmodels.drift.monitor import STATES, field_of
from servecal.costmodels.drift.regions import RegionGrid
from servecal.costmodels.predictor import PLAN_QUANTILE, largest_fitting


@dataclass(frozen=True)
class AdaptiveConfig:
    """``alpha``: target miss rate; ``eta``: step as a fraction of the bound."""

    alpha: float = 1 - PLAN_QUANTILE
    eta: float = 0.01
    always: bool = False
    apply_from: str = "warn"
    warm: int = 50
    q_min: float = -0.5
    q_max: float = 2.0
    grid: RegionGrid = field(default_factory=RegionGrid)

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 0.5:
            raise ValueError("AdaptiveConfig.alpha must be in (0, 0.5)")
        if not 0 < self.eta <= 0.5:
            raise ValueError("AdaptiveConfig.eta must be in (0, 0.5]")
        if self.apply_from not in STATES[1:]:
            raise ValueError(f"AdaptiveConfig.apply_from must be one of {STATES[1:]}")
        if self.warm < 0:
            raise ValueError("AdaptiveConfig.warm must be >= 0")
        if not self.q_min <= 0 < self.q_max:
            raise ValueError("AdaptiveConfig needs q_min <= 0 < q_max")


class AdaptiveMargin:
    """Predictor wrapper with per-region quantile-tracked margins (see module doc)."""

    def __init__(
        self, base: Any, monitor: Any = None, config: AdaptiveConfig | None = None
    ) -> None:
        self.base = base
        self.monitor = monitor
        self.config = config or AdaptiveConfig()
        if monitor is None and not self.config.always:
            raise ValueError("AdaptiveMargin needs a drift monitor unless config.always is set")
        g = self.config.grid
        self.grid = g
        self.q = np.zeros(g.size)
        self.count = np.zeros(g.size, dtype=np.int64)
        self.q_pooled = 0.0
        self.observed = 0
        self._version = 0  # bumps on every update; with `active` it keys the cache
        self._cache: tuple[tuple[int, bool, float], np.ndarray] | None = None

    # -- adaptation --------------------------------------------------------
    def _lift(self) -> float:
        """Floor from the monitor's running slow-down estimate (×1.15 → 0.15).

        Climbing from 0 at η per miss takes tens of misses per region, each one a
        late token for every running request; the monitor already measures the
        slow-down, so while it does, no tracker is used below it.
        """
        factor = getattr(self.monitor, "slowdown_factor", None)
        return 0.0 if factor is None else min(max(float(factor) - 1.0, 0.0), self.config.q_max)

    @property
    def active(self) -> bool:
        if self.config.always:
            return True
        state = getattr(self.monitor, "state", "ok")
        return STATES.index(state) >= STATES.index(self.config.apply_from)

    def scales(self) -> np.ndarray:
        """``1 + Q`` per (n bucket, chunk bucket), monotone along the chunk axis."""
        active = self.active
        lift = self._lift() if active else 0.0
        key = (self._version, active, lift)
        if self._cache is None or self._cache[0] != key:
            g = self.grid
            if active:
                eff = np.where(
                    self.count >= self.config.warm, self.q, np.maximum(self.q, self.q_pooled)
                )
                applied = np.clip(np.maximum(eff, lift), 0.0, self.config.q_max)
            else:
                applied = np.zeros(g.size)
            q = np.maximum.accumulate(applied.reshape(g.n_buckets, g.c_buckets), axis=1)
            self._cache = (key, 1.0 + q)
        return self._cache[1]

    def observe(self, record: Any) -> dict[str, float]:
        """Update the tracker of the record's region (engine calls this every iteration)."""
        n = int(field_of(record, "n_decode", 0))
        c = int(field_of(record, "chunk", 0))
        actual = float(field_of(record, "actual_ms", np.nan))
        if not actual > 0:
            return {"margin_scale": float(self.scales()[self._cell(n, c)])}
        ctx = field_of(record, "ctx", 0) or 0
        pre = field_of(record, "prefix", 0) or 0
        bound = float(self.base.predict(n, c, ctx, pre, q=PLAN_QUANTILE)) + float(
            self.base.margin(n, c, ctx, pre)
        )
        lift = self._lift()
        if lift > 0:  # trackers keep what the monitor measured, then fine-tune from there
            np.maximum(self.q, lift, out=self.q)
            self.q_pooled = max(self.q_pooled, lift)
        if bound > 0:
            ratio = actual / bound
            cfg = self.config
            r = self.grid.index(n, c)
            miss = ratio > 1.0 + self.q[r]
            self.q[r] = min(max(self.q[r] + cfg.eta * (miss - cfg.alpha), cfg.q_min), cfg.q_max)
            miss_pooled = ratio > 1.0 + self.q_pooled
            self.q_pooled = min(
                max(self.q_pooled + cfg.eta * (miss_pooled - cfg.alpha), cfg.q_min), cfg.q_max
            )
            self.count[r] += 1
            self.observed += 1
            self._version += 1
        return {"margin_scale": float(self.scales()[self._cell(n, c)])}

    def _cell(self, n: int, c: int) -> tuple[int, int]:
        return self.grid.n_bucket(n), self.grid.c_bucket(c)

    # -- Predictor protocol ------------------------------------------------
    def predict(
        self,
        n_decode: ArrayLike,
        chunk: ArrayLike,
        ctx: ArrayLike = 0,
        prefix: ArrayLike = 0,
        q: float = 0.5,
    ) -> float | np.ndarray:
        return self.base.predict(n_decode, chunk, ctx, prefix, q=q)

    def margin(
        self,
        n_decode: ArrayLike,
        chunk: ArrayLike,
        ctx: ArrayLike = 0,
        prefix: ArrayLike = 0,
    ) -> float | np.ndarray:
        """Base δ plus ``Q·(P99 + δ)``, so that ``P99 + margin = (1 + Q)(P99 + δ)``."""
        m = self.base.margin(n_decode, chunk, ctx, prefix)
        s = self.scales()
        if np.isscalar(n_decode) and np.isscalar(chunk):
            extra = s[self._cell(int(n_decode), int(chunk))] - 1.0
            if extra == 0.0:
                return float(m)
            p99 = float(self.base.predict(n_decode, chunk, ctx, prefix, q=PLAN_QUANTILE))
            return float(m) + extra * (p99 + float(m))
        nb = np.searchsorted(self.grid.n_edges, np.asarray(n_decode), side="right")
        cb = np.searchsorted(self.grid.c_edges, np.asarray(chunk), side="right")
        extra = s[nb, cb] - 1.0
        p99 = np.asarray(self.base.predict(n_decode, chunk, ctx, prefix, q=PLAN_QUANTILE))
        return m + extra * (p99 + m)

    def max_chunk(
        self,
        n_decode: int,
        ctx: int,
        prefix: int,
        budget_ms: float,
        limit: int,
        q: float = PLAN_QUANTILE,
        use_margin: bool = True,
    ) -> int:
        """Largest ``c ≤ limit`` with ``predict(q) + margin ≤ budget``; exact, O(buckets·log)."""
        row = self.scales()[self.grid.n_bucket(int(n_decode))]
        if not use_margin or not (row > 1.0).any():
            return self.base.max_chunk(n_decode, ctx, prefix, budget_ms, limit, q, use_margin)
        if q != PLAN_QUANTILE:  # the scale is defined on the planning bound: search directly
            return largest_fitting(
                lambda c: self._fits(n_decode, ctx, prefix, c, budget_ms, q), limit
            )
        # Q is a step function of the chunk, non-decreasing: from the top bucket
        # down, the first bucket holding a chunk that fits at B/(1+Q) has the answer.
        for cb in range(self.grid.c_buckets - 1, 0, -1):
            lo, hi = self.grid.c_range(cb)
            if lo > limit:
                continue
            cap = limit if hi is None else min(limit, hi)
            c = self.base.max_chunk(n_decode, ctx, prefix, budget_ms / row[cb], cap, q, True)
            if c >= lo:
                return self._settle(n_decode, ctx, prefix, c, lo, cap, budget_ms, q)
        return 0

    def _fits(self, n: int, ctx: int, prefix: int, c: int, budget: float, q: float) -> bool:
        t = float(self.predict(n, c, ctx, prefix, q=q)) + float(self.margin(n, c, ctx, prefix))
        return t <= budget

    def _settle(
        self, n: int, ctx: int, prefix: int, c: int, lo: int, cap: int, budget: float, q: float
    ) -> int:
        """Undo rounding between ``x ≤ B/s`` and ``s·x ≤ B`` at the boundary."""
        while c >= lo and not self._fits(n, ctx, prefix, c, budget, q):
            c -= 1
        if c < lo:
            return self.max_chunk(n, ctx, prefix, budget, lo - 1, q, True) if lo > 1 else 0
        while c < cap and self._fits(n, ctx, prefix, c + 1, budget, q):
            c += 1
        return c

    def summary(self) -> dict[str, Any]:
        """Where the margin moved, for run.json."""
        g = self.grid
        regions = []
        for r in np.flatnonzero(self.count):
            d = g.describe(int(r))
            d.update({"iterations": int(self.count[r]), "q": float(self.q[r])})
            regions.append(d)
        return {
            "adaptive_margin": {
                "active": self.active,
                "always": self.config.always,
                "observed": self.observed,
                "q_pooled": self.q_pooled,
                "max_scale": float(self.scales().max()),
                "regions": regions,
            }
        }
