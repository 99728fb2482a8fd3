"""The conformal quantile of a margin's scores.

Score: the relative excess ``s = ms / P_tail − 1`` of each held-out row (out of
fold: predicted by a table fitted without its point, see :mod:`crossval`). The
margin is ``δ(x) = rho · P_tail(x)`` with ``rho`` the ``⌈(n+1)·target⌉``-th smallest of
the ``n`` scores (the finite-sample split-conformal quantile), so it scales with the
predicted time: tighter than one absolute δ when times span orders of magnitude.
"""

from __future__ import annotations

import math

import numpy as np

from servecal.util.errors import InputError


def conformal_rho(scores: np.ndarray, target: float) -> float:
    """The ``⌈(n+1)·target⌉``-th smallest score (finite-sample split-conformal quantile)."""
    scores = np.sort(np.asarray(scores, dtype=float))
    n = scores.size
    k = math.ceil((n + 1) * target)
    if k > n:
        need = math.ceil(target / (1.0 - target))
        raise InputError(
            f"samples: column 'ms': {n} calibration rows cannot certify {target:.2%} coverage "
            f"(need >= {need}); add repeats or points, or raise --holdout"
        )
    return float(scores[k - 1])
