"""Samples drawn from a known truth, to check fitting and calibration end to end.

The truth's median is the docs/spec.md §1 formula (:class:`AnalyticPredictor`) plus optional
attention terms and two optional non-smooth shapes real kernels show in the chunk:

* a *tile staircase*: every started tile of ``prefill_tile`` chunk tokens adds
  ``tile_ms`` (a kernel that pays per tile of 128/256 tokens: a jump in cost just
  past every multiple of the tile);
* a *knee*: below ``prefill_knee`` tokens the prefill costs what ``prefill_knee``
  tokens cost (memory-bound: streaming the weights dominates), above it grows
  linearly (compute-bound).

Each iteration is the median times log-normal noise, and with a
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
    prefill_tile: int = 0  # tokens per tile of the staircase (0: none)
    tile_ms: float = 0.0  # ms per started tile
    prefill_knee: int = 0  # chunk below which the prefill is memory-bound (0: none)
    sigma: float = 0.05
    spike_prob: float = 0.003
    spike_scale: float = 2.0
    power_w: float = 300.0

    def __post_init__(self) -> None:
        if self.decode_attention < 0 or self.prefill_attention < 0:
            raise ValueError("attention coefficients must be >= 0")
        if self.prefill_tile < 0 or self.tile_ms < 0 or self.prefill_knee < 0:
            raise ValueError("prefill_tile, tile_ms and prefill_knee must be >= 0")
        if self.sigma < 0 or not 0.0 <= self.spike_prob < 1.0 or self.spike_scale < 1.0:
            raise ValueError("need sigma >= 0, spike_prob in [0, 1), spike_scale >= 1")
        if self.power_w < 0:
            raise ValueError("power_w must be >= 0")

    def median(self, n: np.ndarray, c: np.ndarray, ctx: np.ndarray, p: np.ndarray) -> np.ndarray:
        n, c = np.asarray(n, dtype=float), np.asarray(c, dtype=float)
        base = np.asarray(self.formula.predict(n, c), dtype=float)
        t = base + self.decode_attention * n * ctx + self.prefill_attention * c * (p + c / 2)
        if self.prefill_knee:
            floor = np.maximum(c, self.prefill_knee) - c
            t = t + (c > 0) * self.formula.prefill_per_token * floor
        if self.prefill_tile:
            t = t + self.tile_ms * np.ceil(c / self.prefill_tile)
        return t

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


def scattered_points(
    count: int,
    rng: np.random.Generator,
    n_max: int = 128,
    chunk_max: int = 3072,
    ctx_max: int = 8192,
    prefix_max: int = 4096,
    idle_share: float = 0.15,
) -> pd.DataFrame:
    """``count`` points drawn uniformly at random (integers) on every axis, as a user
    who samples iteration shapes instead of gridding them would: no two share a grid.

    A share ``idle_share`` of the points has no decodes, and another has no prefill
    (decode-only and prefill-only iterations); none is the empty iteration.
    """
    n = rng.integers(0, n_max + 1, count)
    c = rng.integers(0, chunk_max + 1, count)
    n[rng.random(count) < idle_share] = 0
    c[rng.random(count) < idle_share] = 0
    empty = (n + c) == 0
    n[empty] = rng.integers(1, n_max + 1, int(empty.sum()))
    return pd.DataFrame(
        {
            "n_decode": n,
            "chunk": c,
            "ctx": rng.integers(0, ctx_max + 1, count),
            "prefix": rng.integers(0, prefix_max + 1, count),
        }
    )


#: Shapes of :func:`shaped_truth` (the model-choice study in docs/costtable.md).
SHAPES = ("smooth", "step", "knee")


def shaped_truth(shape: str, rng: np.random.Generator, tile_share: float = 1 / 3) -> SyntheticTruth:
    """A known truth of the model-choice study: the docs/spec.md §1 formula plus decode
    attention (``n·ctx``) and prefill attention (``c·(prefix + c/2)``), 5% log-normal
    noise and 1% spikes of 2×, and per ``shape``:

    * ``smooth``: nothing more;
    * ``step``: a tile staircase, tile 128 or 256 chunk tokens (drawn), each started
      tile costing ``tile_share`` of what its tokens cost (a third by default:
      ``0.002 ms × tile``; 1 doubles the prefill's per-token cost into steps);
    * ``knee``: the prefill memory-bound below a knee drawn in [384, 1024] tokens.

    The tile and the knee are drawn from ``rng``, so no fixed value can be tuned to.
    """
    common = dict(decode_attention=5e-6, prefill_attention=1e-7, sigma=0.05, spike_prob=0.01)
    if shape == "smooth":
        return SyntheticTruth(**common)
    if shape == "step":
        tile = int(rng.choice([128, 256]))
        tile_ms = tile_share * AnalyticPredictor().prefill_per_token * tile
        return SyntheticTruth(prefill_tile=tile, tile_ms=tile_ms, **common)
    if shape == "knee":
        return SyntheticTruth(prefill_knee=int(rng.integers(384, 1025)), **common)
    raise ValueError(f"unknown shape {shape!r}; choose {', '.join(SHAPES)}")
