"""Samples drawn from a known truth, to check fitting and calibration end to end.

The truth's median is the SPEC §1 formula (:class:`AnalyticPredictor`) plus optional
attention terms; each iteration is the median times log-normal noise, and with a
small probability a *spike* (a stall: the time multiplied by ``spike_scale``).
Energy is time × a constant power with a little noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from servecal.costmodels.analytic import AnalyticPredictor


@dataclass(frozen=True)
class SyntheticTruth:
    """Known iteration-cost distribution (all times in ms)."""

    formula: AnalyticPredictor = field(default_factory=AnalyticPredictor)
    decode_attention: float = 0.0  # ms per decode token per KV token
    prefill_attention: float = 0.0  # ms per (chunk token × (prefix + chunk/2))
    sigma: float = 0.05
    spike_prob: float = 0.003
    spike_scale: float = 2.0
    power_w: float = 300.0

    def __post_init__(self) -> None:
        if self.decode_attention < 0 or self.prefill_attention < 0:
            raise ValueError("attention coefficients must be >= 0")
        if self.sigma < 0 or not 0.0 <= self.spike_prob < 1.0 or self.spike_scale < 1.0:
            raise ValueError("need sigma >= 0, spike_prob in [0, 1), spike_scale >= 1")
        if self.power_w < 0:
            raise ValueError("power_w must be >= 0")

    def median(self, n: np.ndarray, c: np.ndarray, ctx: np.ndarray, p: np.ndarray) -> np.ndarray:
        base = np.asarray(self.formula.predict(np.asarray(n), np.asarray(c)), dtype=float)
        return base + self.decode_attention * n * ctx + self.prefill_attention * c * (p + c / 2)

    def draw(self, points: pd.DataFrame, repeats: int, rng: np.random.Generator) -> pd.DataFrame:
        """``repeats`` rows per point (columns n_decode, chunk, ctx, prefix)."""
        if repeats < 1:
            raise ValueError("repeats must be >= 1")
        rows = points.loc[points.index.repeat(repeats)].reset_index(drop=True)
        cols = [rows[c].to_numpy(dtype=float) for c in ("n_decode", "chunk", "ctx", "prefix")]
        ms = self.median(*cols) * np.exp(self.sigma * rng.standard_normal(len(rows)))
        ms = np.where(rng.random(len(rows)) < self.spike_prob, ms * self.spike_scale, ms)
        rows["ms"] = ms
        rows["energy_j"] = ms / 1000.0 * self.power_w * (1 + 0.01 * rng.standard_normal(len(rows)))
        rows["rep"] = np.tile(np.arange(repeats), len(points))
        return rows


def grid_points(
    n_decode: Sequence[int],
    chunk: Sequence[int],
    ctx: Sequence[int] = (0,),
    prefix: Sequence[int] = (0,),
) -> pd.DataFrame:
    """Full factorial design, dropping the empty iteration (n_decode = chunk = 0)."""
    mesh = np.meshgrid(n_decode, chunk, ctx, prefix, indexing="ij")
    frame = pd.DataFrame(
        {
            k: m.reshape(-1)
            for k, m in zip(("n_decode", "chunk", "ctx", "prefix"), mesh, strict=True)
        }
    )
    return frame[(frame.n_decode + frame.chunk) > 0].reset_index(drop=True)
