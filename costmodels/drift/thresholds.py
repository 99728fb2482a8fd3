"""Alarm thresholds from a noise profile and a false-alarm budget.

The mean-shift detectors are one-sided CUSUMs ``S ← max(0, S + x − k)`` on the
standardised residual ``u`` (upward for slow-downs, on ``−u`` for speed-ups).
``k`` is half the smallest slow-down worth acting on, in units of the
calibration's own spread. ``h`` comes from the *empirical* distribution of the
in-control increments ``x − k`` (spikes and skew included, nothing assumed
normal): with ``θ*`` the positive root of ``E[exp(θ(x − k))] = 1``,
``exp(θ*·S)`` is a likelihood-ratio martingale and Lorden's bound gives an
average run length between false alarms ``ARL₀ ≥ exp(θ*·h)``; so
``h = log(ARL₀) / θ*``. (For normal increments ``θ* = 2k``: ``h`` is ~15%
above Siegmund's approximation, on the safe side. A Brook–Evans Markov chain
was tried first; at the small ``k`` of noisy calibrations its state grid
rounds the drift ``−k`` away and the thresholds it gave were off by 2×.)

The tail detector is a Bernoulli CUSUM of the log-likelihood ratio of
"``actual > P99 + δ``" at the promised rate ``p0`` against ``p1 = ratio·p0``;
there ``θ* = 1`` and its threshold is ``log(ARL₀)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from servecal.costmodels.drift.profile import NoiseProfile


def tilt(increments: np.ndarray) -> float:
    """``θ* > 0`` with ``mean(exp(θ*·x)) = 1``; ``inf`` when no increment is positive."""
    x = np.asarray(increments, dtype=float)
    if x.max() <= 0:
        return math.inf
    if x.mean() >= 0:
        raise ValueError("CUSUM increments must drift downwards in control (is k > 0?)")
    top = x.max()

    def log_mgf(theta: float) -> float:  # log mean exp(θx), computed without overflow
        return theta * top + math.log(float(np.mean(np.exp(theta * (x - top)))))

    lo, hi = 0.0, 1.0
    while log_mgf(hi) < 0:
        lo, hi = hi, hi * 2
    while hi - lo > 1e-9 * hi:
        mid = 0.5 * (lo + hi)
        if log_mgf(mid) < 0:
            lo = mid
        else:
            hi = mid
    return hi


def cusum_threshold(atoms: np.ndarray, k: float, arl0: float) -> float:
    """``h`` with ``ARL₀ ≥ arl0`` for ``S ← max(0, S + x − k)``, x ~ atoms (Lorden)."""
    if k <= 0:
        raise ValueError("CUSUM reference value k must be > 0")
    theta = tilt(np.asarray(atoms, dtype=float) - k)
    return math.log(arl0) / theta if math.isfinite(theta) else math.log(arl0)


@dataclass(frozen=True)
class Thresholds:
    """Everything the detectors need, all in standardised units (no ms anywhere)."""

    k_up: float
    h_up: float
    k_down: float
    h_down: float
    tail_hit: float  # LLR added when actual > P99 + δ
    tail_miss: float  # LLR added otherwise (negative)
    h_tail: float

    def to_dict(self) -> dict[str, float]:
        return {
            "k_up": self.k_up,
            "h_up": self.h_up,
            "k_down": self.k_down,
            "h_down": self.h_down,
            "tail_hit": self.tail_hit,
            "tail_miss": self.tail_miss,
            "h_tail": self.h_tail,
        }


@lru_cache(maxsize=64)  # profiles are frozen: monitors of one run share the work
def derive_thresholds(
    profile: NoiseProfile,
    *,
    min_shift: float,
    arl0: float,
    tail_p0: float,
    tail_ratio: float,
) -> Thresholds:
    """Thresholds for a profile: each detector gets in-control ARL ≥ ``arl0``."""
    atoms = np.asarray(profile.atoms, dtype=float)
    # Half the smallest relevant shift, in units of u; clamped so a very quiet
    # calibration still gets a usable k and a very noisy one a reachable h.
    unit = profile.unit
    k_up = min(max(math.log1p(min_shift) / (2 * unit), 0.05), 1.0)
    k_down = min(max(-math.log1p(-min_shift) / (2 * unit), 0.05), 1.0)
    # The centre is itself estimated (a median of n residuals), and a small error
    # in it multiplies the false-alarm rate (ARL ~ e^(2(k − error)h)): h must hold
    # the budget for a centre that is off by 2 standard errors in its direction
    # (at most k/2: a tiny calibration sample cannot promise the full budget).
    slack = min(2 * profile.center_se / unit, min(k_up, k_down) / 2)
    h_up = cusum_threshold(atoms + slack, k_up, arl0)
    h_down = cusum_threshold(-atoms + slack, k_down, arl0)
    p1 = tail_ratio * tail_p0
    hit = math.log(p1 / tail_p0)
    miss = math.log((1 - p1) / (1 - tail_p0))
    return Thresholds(k_up, h_up, k_down, h_down, hit, miss, math.log(arl0))
