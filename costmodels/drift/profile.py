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

from collections.abc import Sequence
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class NoiseProfile:
    """Centre, scale and shape of the log residual under calibration conditions."""

    center: float
    scale: float
    clip: float = 3.0
    clipped_mean: float = 0.0
    clipped_std: float = 1.0
    atoms: tuple[float, ...] = field(default=(), repr=False)
    n: int = 0
    source: str = "unspecified"

    def __post_init__(self) -> None:
        if not np.isfinite(self.center):
            raise ValueError("NoiseProfile.center must be finite")
        if not self.scale > 0:
            raise ValueError("NoiseProfile.scale must be > 0")
        if not self.clip > 0:
            raise ValueError("NoiseProfile.clip must be > 0")
        if not self.clipped_std > 0:
            raise ValueError("NoiseProfile.clipped_std must be > 0")
        if len(self.atoms) < 2:
            raise ValueError("NoiseProfile.atoms needs at least 2 values")

    # -- construction ------------------------------------------------------
    @classmethod
    def from_residuals(
        cls,
        log_ratio: ArrayLike,
        *,
        center: float | None = None,
        clip: float = 3.0,
        source: str = "calibration residuals",
    ) -> NoiseProfile:
        """Profile from log residuals ``log(actual/P50)`` of held-out points.

        ``center`` overrides the estimated centre: when the residuals come from the
        very measurements under test, pass ``0.0`` (the P50 promise) so that a shift
        in them is not absorbed; the scale (a MAD) does not move with a shift.
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
        zc = np.clip((r - med) / scale, -clip, clip)
        mean, std = float(zc.mean()), float(zc.std())
        if std < 1e-9:
            std = 1.0
        u = (zc - mean) / std
        atoms = np.quantile(u, (np.arange(N_ATOMS) + 0.5) / N_ATOMS)
        return cls(c0, scale, clip, mean, std, tuple(float(a) for a in atoms), int(r.size), source)

    @classmethod
    def lognormal(
        cls, sigma: float, *, clip: float = 3.0, source: str = "log-normal"
    ) -> NoiseProfile:
        """Profile of an exactly log-normal time with log-σ ``sigma`` (centre 0)."""
        sigma = max(float(sigma), MIN_SCALE)
        # Quantiles of a standard normal stand in for a sample of it.
        p = (np.arange(20 * N_ATOMS) + 0.5) / (20 * N_ATOMS)
        z = np.array([NormalDist().inv_cdf(float(x)) for x in p])
        zc = np.clip(z, -clip, clip)
        mean, std = float(zc.mean()), float(zc.std())
        u = (zc - mean) / std
        atoms = np.quantile(u, (np.arange(N_ATOMS) + 0.5) / N_ATOMS)
        return cls(0.0, sigma, clip, mean, std, tuple(float(a) for a in atoms), 0, source)

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

    def to_dict(self) -> dict[str, float | int | str]:
        """The numbers a report shows (the atoms stay internal)."""
        return {
            "center": self.center,
            "scale": self.scale,
            "clip": self.clip,
            "residuals": self.n,
            "source": self.source,
        }
