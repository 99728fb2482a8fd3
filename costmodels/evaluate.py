"""Held-out accuracy of a cost table on measured rows (``servecal eval``).

Keys (exactly): ``p50_mape``, ``p99_coverage``, ``pinball``, ``tightness``,
``out_of_domain``, ``checked``, ``rows``.

* ``p50_mape``: mean over *points* of |P50 − measured median| / measured median (a
  point's median over its repeats: per-row error would only measure the noise);
* ``p99_coverage``: fraction of *rows* with ms <= P_tail + δ;
* ``pinball``: mean pinball loss per table quantile, over rows, in ms;
* ``tightness``: mean over rows of (P_tail + δ) / ms − 1;
* ``out_of_domain``: rows whose query lies beyond the grid's hull on some axis
  (clamped; between grid values is inside);
* ``checked``: rows inside the grid (``rows - out_of_domain``): what the metrics
  vouch for (``servecal eval`` refuses a check where this is 0);
* ``rows``: rows evaluated.

Metrics the table cannot answer (no P50, or no tail/margin) are ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from servecal.costmodels.samples import POINT_COLUMNS
from servecal.costmodels.table import CostTable

METRIC_KEYS = (
    "p50_mape",
    "p99_coverage",
    "pinball",
    "tightness",
    "out_of_domain",
    "checked",
    "rows",
)


def pinball_losses(y: np.ndarray, pred: np.ndarray, q: float) -> np.ndarray:
    """Pinball (quantile) loss of ``pred`` as the ``q``-quantile of ``y``, per row."""
    diff = y - pred
    return np.maximum(q * diff, (q - 1.0) * diff)


def pinball_loss(y: np.ndarray, pred: np.ndarray, q: float) -> float:
    """Mean pinball (quantile) loss of ``pred`` as the ``q``-quantile of ``y``."""
    return float(np.mean(pinball_losses(y, pred, q)))


def evaluate(table: CostTable, frame: pd.DataFrame) -> dict[str, Any]:
    """Accuracy of ``table`` on validated sample rows ``frame`` (see module docstring)."""
    if len(frame) == 0:
        raise ValueError("evaluate needs at least one row")
    query = [frame[c].to_numpy(dtype=float) for c in ("n_decode", "chunk", "ctx", "prefix")]
    predictions, clamped = {}, np.zeros(len(frame), dtype=bool)
    for q in table.quantiles:
        predictions[q], clamped = table.lookup(q, *query)
    bound = table.lookup_bound(*query) if table.margin_info is not None else None
    return metrics_from_predictions(frame, predictions, bound, clamped)


def metrics_from_predictions(
    frame: pd.DataFrame,
    predictions: Mapping[float, np.ndarray],
    bound: np.ndarray | None,
    clamped: np.ndarray,
) -> dict[str, Any]:
    """The metrics of the module docstring from per-row predictions (``q`` → values),
    the planning bound ``P_tail + δ`` per row (or None) and which rows were clamped."""
    ms = frame["ms"].to_numpy(dtype=float)
    p50_mape = None
    if 0.5 in predictions:
        per_point = pd.DataFrame({"key": _point_keys(frame), "ms": ms, "p": predictions[0.5]})
        points = per_point.groupby("key", sort=False).agg(ms=("ms", "median"), p=("p", "first"))
        p50_mape = float(np.mean(np.abs(points["p"] - points["ms"]) / points["ms"]))
    return {
        "p50_mape": p50_mape,
        "p99_coverage": None if bound is None else float(np.mean(ms <= bound)),
        "pinball": {q: pinball_loss(ms, predictions[q], q) for q in sorted(predictions)},
        "tightness": None if bound is None else float(np.mean(bound / ms - 1.0)),
        "out_of_domain": int(np.sum(clamped)),
        "checked": int(len(frame) - np.sum(clamped)),
        "rows": int(len(frame)),
    }


def _point_keys(frame: pd.DataFrame) -> np.ndarray:
    """One integer id per distinct (n_decode, chunk, ctx, prefix) point."""
    return frame.groupby(list(POINT_COLUMNS), sort=False).ngroup().to_numpy()
