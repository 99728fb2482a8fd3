"""``--truth fit:PATH``: the docs/spec.md §1 formula with its coefficients fitted to measured
samples, so the study can run at a real device's speed with an exact predictor.

The analytic default (0.006 ms per prefill token) makes a 5k-token prompt cost
31 ms, far below multislo's 250 ms text SLO, so no prefill can block another for
long. Measured Llama-3-8B on an A100 (aiconfigurator's operator profiles composed
by ``servecal import``) costs ≈ 0.06 ms per token. The fit is non-negative least
squares of ``ms`` on ``[1, 1[n>0], n, 1[c>0], c]`` over every sample row; prefix and
ctx effects are averaged into the slopes, and prompts beyond the profiled sizes
are extrapolated linearly (attention's quadratic term is ignored: long prompts
come out slightly cheap).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy.optimize import nnls

from servecal.costmodels.analytic import AnalyticPredictor
from servecal.sched.truth import AnalyticTruth
from servecal.util.errors import InputError


def fit_formula(n_decode: np.ndarray, chunk: np.ndarray, ms: np.ndarray) -> AnalyticPredictor:
    """docs/spec.md §1 coefficients (all ≥ 0) that best fit ``ms`` in least squares."""
    n = np.asarray(n_decode, dtype=float)
    c = np.asarray(chunk, dtype=float)
    design = np.column_stack([np.ones_like(n), n > 0, n, c > 0, c]).astype(float)
    coef, _ = nnls(design, np.asarray(ms, dtype=float))
    base, dfix, dper, pfix, pper = (float(x) for x in coef)
    if pper <= 0:
        raise InputError("fit: samples give no positive per-token prefill cost")
    return AnalyticPredictor(base, dfix, dper, pfix, pper)


@lru_cache(maxsize=8)
def fitted_truth(path: str) -> AnalyticTruth:
    """``--truth fit:PATH`` → an :class:`AnalyticTruth` with coefficients fitted to the
    samples at PATH."""
    from servecal.costmodels.samples import read_samples

    frame = read_samples(path).frame
    if frame.empty:
        raise InputError(f"--truth fit:{path}: no sample rows")
    formula = fit_formula(frame["n_decode"], frame["chunk"], frame["ms"])
    return AnalyticTruth(formula=formula)
