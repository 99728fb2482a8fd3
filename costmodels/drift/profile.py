"""The calibration's noise, in the units the drift detectors work in.

Everything the monitor tests is the *log residual* ``r = log(actual / P50)`` of
one iteration. On held-out calibration points ``r`` has a centre (≈ 0 when the
P50 is right) and a spread; the detectors see it standardised, clipped (so a
single OS hiccup cannot carry a whole alarm) and re-standardised:

    u = (clip((r − center) / scale, ±clip) − clipped_mean) / clipped_std

``u`` has mean 0 and variance 1 under the calibration's own conditions, and its
empirical distribution (kept as equal-weight quantiles) is what the alarm
thresholds are computed from. So the user never picks a threshold in ms or in
σ: a profile comes from calibration residuals, from a predictor's own
P50/P99 spread, or (for a one-off check) from the measurements being checked.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist

import numpy as np
from numpy.typing import ArrayLike

#: Standard-normal 99% quantile: log(P99/P50) = Z99·σ for a log-normal time.
Z99 = NormalDist().inv_cdf(0.99)
#: MAD → σ for a normal distribution.
MAD_TO_SIGMA = 1.4826
#: Scale floor (0.1%): a noiseless truth still needs a finite unit.
MIN_SCALE = 1e-3
#: Fewest residuals a profile is built from.
MIN_RESIDUALS = 20
#: Quantiles kept to describe the distribution of ``u`` (equal-weight atoms).
N_ATOMS = 401


#: Clip levels (in robust σ) the detector statistic may use; the one that carries
#: the most information about a shift in *these* residuals is kept.
CLIP_CHOICES = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
#: Clip of the size estimate (a Huber-type mean: stalls do not inflate it).
EFFECT_CLIP = 3.0
#: Probability half-band around the median used to estimate the density there.
MEDIAN_BAND = 0.1
#: Half-width (in robust σ) of the finite difference that measures the slope.
SLOPE_STEP = 0.1


def _shape(z: np.ndarray, clip: float) -> tuple[float, float, float, float]:
    """Mean, std, slope and information of ``clip(z, ±clip)`` under shifts of ``z``."""
    zc = np.clip(z, -clip, clip)
    hi = np.clip(z + SLOPE_STEP, -clip, clip).mean()
    lo = np.clip(z - SLOPE_STEP, -clip, clip).mean()
    slope = float(hi - lo) / (2 * SLOPE_STEP)
    std = float(zc.std())
    if std < 1e-9:
        return float(zc.mean()), 1.0, 1.0, 0.0
    return float(zc.mean()), std, slope, slope * slope / (std * std)


@dataclass(frozen=True)
class NoiseProfile:
    """Centre, scale and shape of the log residual under calibration conditions.

    ``slope`` is how far the mean of ``clip(z)`` moves per unit shift of ``z``
    (1 without clipping, less with it); ``effect_mean`` is the calibration mean
    of ``clip(z, ±EFFECT_CLIP)``, the zero of the size estimate; ``center_se``
    the standard error of ``center`` (0 when it was imposed, not estimated).
    """

    center: float
    scale: float
    clip: float = 3.0
    clipped_mean: float = 0.0
    clipped_std: float = 1.0
    atoms: tuple[float, ...] = field(default=(), repr=False)
    n: int = 0
    source: str = "unspecified"
    slope: float = 1.0
    effect_mean: float = 0.0
    center_se: float = 0.0

    def __post_init__(self) -> None:
        if not np.isfinite(self.center):
            raise ValueError("NoiseProfile.center must be finite")
        if not self.scale > 0:
            raise ValueError("NoiseProfile.scale must be > 0")
        if not self.clip > 0:
            raise ValueError("NoiseProfile.clip must be > 0")
        if not self.clipped_std > 0:
            raise ValueError("NoiseProfile.clipped_std must be > 0")
        if not self.slope > 0:
            raise ValueError("NoiseProfile.slope must be > 0")
        if len(self.atoms) < 2:
            raise ValueError("NoiseProfile.atoms needs at least 2 values")

    # -- construction ------------------------------------------------------
    @classmethod
    def from_residuals(
        cls,
        log_ratio: ArrayLike,
        *,
        center: float | None = None,
        clip: float | None = None,
        source: str = "calibration residuals",
    ) -> NoiseProfile:
        """Profile from log residuals ``log(actual/P50)`` of held-out points.

        ``center`` overrides the estimated centre: when the residuals come from the
        very measurements under test, pass ``0.0`` (the P50 promise) so that a shift
        in them is not absorbed; the scale (a MAD) does not move with a shift.
        ``clip`` (robust σ) defaults to the choice in :data:`CLIP_CHOICES` with the
        highest information ``slope² / var`` on these residuals: near-normal noise
        keeps a wide clip (a mean), peaked or stall-ridden noise a narrow one
        (towards a sign test).
        """
        r = np.asarray(log_ratio, dtype=float).ravel()
        r = r[np.isfinite(r)]
        if r.size < MIN_RESIDUALS:
            raise ValueError(f"need at least {MIN_RESIDUALS} residuals, got {r.size}")
        med = float(np.median(r))
        scale = MAD_TO_SIGMA * float(np.median(np.abs(r - med)))
        if scale < MIN_SCALE:
            scale = max(float(np.std(r)), MIN_SCALE)
        c0 = med if center is None else float(center)
        # The shape is taken around the sample's own median: with an imposed
        # centre the spread must not include the shift we are testing for.
        z = (r - med) / scale
        if clip is None:
            clip = max(CLIP_CHOICES, key=lambda c: _shape(z, c)[3])
        se = 0.0
        if center is None:  # a median's standard error, 1 / (2 f(median) √n)
            q_lo, q_hi = np.quantile(r, [0.5 - MEDIAN_BAND, 0.5 + MEDIAN_BAND])
            density = 2 * MEDIAN_BAND / max(float(q_hi - q_lo), 1e-12)
            se = 1.0 / (2 * density * math.sqrt(r.size))
        return replace(cls._build(z, c0, scale, float(clip), int(r.size), source), center_se=se)

    @classmethod
    def _build(
        cls, z: np.ndarray, center: float, scale: float, clip: float, n: int, source: str
    ) -> NoiseProfile:
        mean, std, slope, _ = _shape(z, clip)
        u = (np.clip(z, -clip, clip) - mean) / std
        atoms = tuple(float(a) for a in np.quantile(u, (np.arange(N_ATOMS) + 0.5) / N_ATOMS))
        effect_mean = float(np.clip(z, -EFFECT_CLIP, EFFECT_CLIP).mean())
        return cls(center, scale, clip, mean, std, atoms, n, source, max(slope, 1e-3), effect_mean)

    @classmethod
    def lognormal(
        cls, sigma: float, *, clip: float = 3.0, source: str = "log-normal"
    ) -> NoiseProfile:
        """Profile of an exactly log-normal time with log-σ ``sigma`` (centre 0)."""
        sigma = max(float(sigma), MIN_SCALE)
        # Quantiles of a standard normal stand in for a sample of it.
        p = (np.arange(20 * N_ATOMS) + 0.5) / (20 * N_ATOMS)
        z = np.array([NormalDist().inv_cdf(float(x)) for x in p])
        return cls._build(z, 0.0, sigma, clip, 0, source)

    @property
    def unit(self) -> float:
        """The shift of ``log(actual/P50)`` that moves ``u`` by one."""
        return self.scale * self.clipped_std / self.slope

    @classmethod
    def from_predictor(
        cls, predictor: object, points: Sequence[tuple[int, int, int, int]]
    ) -> NoiseProfile:
        """Profile implied by a predictor's own P50→P99 spread (log-normal reading).

        ``σ = log(P99/P50) / Z99`` at each point, median over ``points``. Spikes fatten
        a measured P99, so this errs towards a larger σ: fewer false alarms, later
        detection. Use calibration residuals when the table carries them.
        """
        if not points:
            raise ValueError("from_predictor needs at least one (n_decode, chunk, ctx, prefix)")
        arr = np.asarray(points, dtype=float)
        n, c, ctx, pre = arr.T
        p50 = np.asarray(predictor.predict(n, c, ctx, pre, q=0.5), dtype=float)  # type: ignore[attr-defined]
        p99 = np.asarray(predictor.predict(n, c, ctx, pre, q=0.99), dtype=float)  # type: ignore[attr-defined]
        ok = (p50 > 0) & (p99 > 0)
        if not ok.any():
            raise ValueError("predictor gave no positive P50/P99 at the given points")
        sigma = float(np.median(np.log(p99[ok] / p50[ok]))) / Z99
        return cls.lognormal(sigma, source="predictor P50/P99 spread (log-normal)")

    # -- use ---------------------------------------------------------------
    def standardise(self, log_ratio: ArrayLike) -> np.ndarray | float:
        """``u`` for one residual (float in, float out) or many (array in, array out)."""
        if isinstance(log_ratio, float | int):
            z = (float(log_ratio) - self.center) / self.scale
            z = self.clip if z > self.clip else (-self.clip if z < -self.clip else z)
            return (z - self.clipped_mean) / self.clipped_std
        z = np.clip(
            (np.asarray(log_ratio, dtype=float) - self.center) / self.scale, -self.clip, self.clip
        )
        return (z - self.clipped_mean) / self.clipped_std

    def effect(self, log_ratio: float) -> float:
        """Huber-clipped residual in robust σ; its excess mean over calibration is the shift."""
        z = (log_ratio - self.center) / self.scale
        return EFFECT_CLIP if z > EFFECT_CLIP else (-EFFECT_CLIP if z < -EFFECT_CLIP else z)

    def factor(self, mean_effect: float) -> float:
        """Ratio actual/P50 relative to calibration from a mean of :meth:`effect`."""
        return math.exp(self.scale * (mean_effect - self.effect_mean))

    def to_dict(self) -> dict[str, float | int | str]:
        """The numbers a report shows (the atoms stay internal)."""
        return {
            "center": self.center,
            "scale": self.scale,
            "clip": self.clip,
            "slope": self.slope,
            "center_se": self.center_se,
            "residuals": self.n,
            "source": self.source,
        }
