"""Fit a power model (sched/power.py) to a calibration's metered samples.

``servecal calibrate`` on a GPU records each point's ``energy_j`` from NVML (a group of
back-to-back iterations read around, divided by their count) beside its ``ms``: a
point's power is ``energy_j / ms``. This fits the model's two pieces to those powers
by least squares, in the rows the iteration multiplies (``n_decode + chunk``):

    P = clip(a + b·log2(rows), decode_w, max_w)

``max_w`` (the board limit) and ``idle_w`` (no iteration runs in a calibration) are
given. The result is a ``servecal.power_model/1`` document for ``--power FILE``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from servecal.sched.power import POWER_SCHEMA, power_model_from_doc
from servecal.util.errors import InputError


def _clip_line(params: np.ndarray, log_rows: np.ndarray, max_w: float) -> np.ndarray:
    a, b, decode = params
    return np.minimum(max_w, np.maximum(decode, a + b * log_rows))


def fit_power_doc(
    samples: pd.DataFrame, name: str, device: str, max_w: float, idle_w: float, source: str
) -> dict[str, Any]:
    """A ``servecal.power_model/1`` document fitted to ``samples``' metered powers."""
    if "energy_j" not in samples:
        raise InputError(f"{source}: no energy_j column: the calibration had no meter")
    frame = samples[np.isfinite(samples["energy_j"].to_numpy(dtype=float))]
    if frame.empty:
        raise InputError(f"{source}: every energy_j is null: the calibration had no meter")
    rows = (frame["n_decode"] + frame["chunk"]).to_numpy(dtype=float)
    watts = frame["energy_j"].to_numpy(dtype=float) / frame["ms"].to_numpy(dtype=float) * 1e3
    log_rows = np.log2(np.maximum(rows, 1.0))
    if np.unique(log_rows).size < 3:
        raise InputError(f"{source}: need samples at three or more row counts to fit power")
    small = watts[rows <= np.quantile(rows, 0.25)]
    start = np.array([float(np.median(watts)) - 10.0, 10.0, float(np.median(small))])
    fit = least_squares(
        lambda p: _clip_line(p, log_rows, max_w) - watts,
        start,
        bounds=([-np.inf, 0.0, 0.0], [np.inf, np.inf, max_w]),
    )
    a, b, decode = (float(v) for v in fit.x)
    residual = _clip_line(fit.x, log_rows, max_w) - watts
    doc = {
        "schema": POWER_SCHEMA,
        "name": name,
        "device": device,
        "parameters": {
            "tdp_w": max_w,
            "idle_w": min(idle_w, decode),
            "decode_w": round(decode, 3),
            "max_w": max_w,
            "intercept_w": round(a, 3),
            "slope_w": round(b, 3),
        },
        "sources": {"all": f"{source}: energy_j / ms per sample (metered)"},
        "fit": {
            "samples": {
                "points": int(len(watts)),
                "rmse_w": round(float(np.sqrt(np.mean(residual**2))), 3),
                "max_abs_w": round(float(np.abs(residual).max()), 3),
            },
            "idle": "given, not fitted (a calibration runs no idle gaps)",
        },
    }
    power_model_from_doc(doc, source)  # the same checks a loader makes
    return doc
