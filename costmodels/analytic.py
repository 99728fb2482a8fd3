"""The SLOWeave simulator's closed-form iteration cost (docs/spec.md §1) as a predictor.

    T(n, c) = base + 1[n>0]·(decode_fixed + decode_per_token·n)
                   + 1[c>0]·(prefill_fixed + prefill_per_token·c)        [ms]

With ``sigma = 0`` this is exact ("oracle") for a truth without noise. With
``sigma > 0`` it describes a log-normal truth ``T·exp(σZ)``: quantile ``q`` is
``T·exp(σ·Φ⁻¹(q))`` and the margin is 0 because the quantile is already exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from numpy.typing import ArrayLike

from servecal.costmodels.predictor import PLAN_QUANTILE


@dataclass(frozen=True)
class AnalyticPredictor:
    """docs/spec.md §1 formula; coefficients default to the paper's, all in ms."""

    base: float = 0.35
    decode_fixed: float = 0.90
    decode_per_token: float = 0.055
    prefill_fixed: float = 0.40
    prefill_per_token: float = 0.006
    sigma: float = 0.0

    def __post_init__(self) -> None:
        for name in ("base", "decode_fixed", "decode_per_token", "prefill_fixed"):
            if getattr(self, name) < 0:
                raise ValueError(f"AnalyticPredictor.{name} must be >= 0")
        if self.prefill_per_token <= 0:
            raise ValueError("AnalyticPredictor.prefill_per_token must be > 0")
        if self.sigma < 0:
            raise ValueError("AnalyticPredictor.sigma must be >= 0")

    def _median(self, n: float, c: float) -> float:
        t = self.base
        if n > 0:
            t += self.decode_fixed + self.decode_per_token * n
        if c > 0:
            t += self.prefill_fixed + self.prefill_per_token * c
        return t

    def _scale(self, q: float) -> float:
        if not 0.0 < q < 1.0:
            raise ValueError(f"quantile must be in (0, 1), got {q}")
        return 1.0 if self.sigma == 0 else math.exp(self.sigma * NormalDist().inv_cdf(q))

    def predict(
        self,
        n_decode: ArrayLike,
        chunk: ArrayLike,
        ctx: ArrayLike = 0,
        prefix: ArrayLike = 0,
        q: float = 0.5,
    ) -> float | np.ndarray:
        scale = self._scale(q)
        if np.isscalar(n_decode) and np.isscalar(chunk):
            return self._median(float(n_decode), float(chunk)) * scale
        n = np.asarray(n_decode, dtype=float)
        c = np.asarray(chunk, dtype=float)
        t = (
            self.base
            + (n > 0) * (self.decode_fixed + self.decode_per_token * n)
            + (c > 0) * (self.prefill_fixed + self.prefill_per_token * c)
        )
        return t * scale

    def margin(
        self,
        n_decode: ArrayLike,
        chunk: ArrayLike,
        ctx: ArrayLike = 0,
        prefix: ArrayLike = 0,
    ) -> float | np.ndarray:
        if np.isscalar(n_decode) and np.isscalar(chunk):
            return 0.0
        return np.zeros(np.broadcast(np.asarray(n_decode), np.asarray(chunk)).shape)

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
        scale = self._scale(q)
        limit = int(limit)

        def fits(c: int) -> bool:
            return self._median(n_decode, c) * scale <= budget_ms

        if limit < 1 or not fits(1):
            return 0
        # T is linear in c for c >= 1: solve it, then let the float comparison that
        # ``predict`` uses decide the last token (the closed form may be off by one).
        c = min(
            limit,
            max(
                1,
                int(
                    (budget_ms / scale - self._median(n_decode, 0) - self.prefill_fixed)
                    / self.prefill_per_token
                ),
            ),
        )
        while c < limit and fits(c + 1):
            c += 1
        while c > 1 and not fits(c):
            c -= 1
        return c
