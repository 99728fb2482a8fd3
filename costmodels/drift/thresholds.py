"""Alarm thresholds from a noise profile and a false-alarm budget.

The mean-shift detectors are one-sided CUSUMs ``S ← max(0, S + x − k)`` on the
standardised residual ``u`` (upward for slow-downs, on ``−u`` for speed-ups).
``k`` is half the smallest slow-down worth acting on, in units of the
calibration's own spread; ``h`` is the smallest threshold whose in-control
average run length (ARL₀, iterations between false alarms) reaches the budget,
computed by the Brook–Evans Markov chain over the *empirical* distribution of
``u`` (so spikes and skew in the calibration residuals are accounted for, not
assumed normal).

The tail detector is a Bernoulli CUSUM of the log-likelihood ratio of
"``actual > P99 + δ``" at the promised rate ``p0`` against ``p1 = ratio·p0``;
its threshold ``log(ARL₀)`` is Lorden's bound (ARL₀ ≥ e^h).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from servecal.costmodels.drift.profile import NoiseProfile

#: States of the Markov-chain approximation (ARL within ~3% of 300 states).
CHAIN_STATES = 150


def cusum_arl(atoms: np.ndarray, k: float, h: float, states: int = CHAIN_STATES) -> float:
    """In-control ARL of ``S ← max(0, S + x − k)``, alarm at ``S ≥ h``, x ~ atoms."""
    x = np.asarray(atoms, dtype=float) - k
    if x.max() <= 0:
        return math.inf
    w = h / states
    s = np.arange(states) * w
    nxt = np.maximum(0.0, s[:, None] + x[None, :])
    inside = nxt < h
    idx = np.minimum(np.rint(nxt / w).astype(int), states - 1)
    flat = (np.arange(states)[:, None] * states + idx)[inside]
    p = np.bincount(flat, minlength=states * states).reshape(states, states) / x.size
    try:
        arl = np.linalg.solve(np.eye(states) - p, np.ones(states))
    except np.linalg.LinAlgError:
        return math.inf
    return float(arl[0]) if np.isfinite(arl[0]) and arl[0] > 0 else math.inf


def cusum_threshold(atoms: np.ndarray, k: float, arl0: float) -> float:
    """Smallest ``h`` (to 1%) with ``cusum_arl(atoms, k, h) ≥ arl0``."""
    if k <= 0:
        raise ValueError("CUSUM reference value k must be > 0")
    # Start from Siegmund's normal approximation, then bracket and bisect.
    guess = max(math.log(max(arl0 * 2 * k * k, 2.0)) / (2 * k) - 1.166, 0.5)
    lo, hi = 0.7 * guess, 1.3 * guess
    while cusum_arl(atoms, k, lo) >= arl0 and lo > 1e-3:
        lo, hi = lo / 2, lo
    while cusum_arl(atoms, k, hi) < arl0:
        lo, hi = hi, hi * 2
        if hi > 1e4:
            raise ValueError("CUSUM threshold did not converge")
    while hi - lo > 0.01 * hi:
        mid = 0.5 * (lo + hi)
        if cusum_arl(atoms, k, mid) >= arl0:
            hi = mid
        else:
            lo = mid
    return hi


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
    # the budget for a centre that is off by 2 standard errors in its direction.
    slack = 2 * profile.center_se / unit
    h_up = cusum_threshold(atoms + slack, k_up, arl0)
    h_down = cusum_threshold(-atoms + slack, k_down, arl0)
    p1 = tail_ratio * tail_p0
    hit = math.log(p1 / tail_p0)
    miss = math.log((1 - p1) / (1 - tail_p0))
    return Thresholds(k_up, h_up, k_down, h_down, hit, miss, math.log(arl0))
