"""Held-out accuracy of a cost table on measured rows (``servecal eval``).

Keys (exactly): ``p50_mape``, ``p99_coverage``, ``pinball``, ``tightness``,
``out_of_domain``, ``rows``.

* ``p50_mape``: mean over *points* of |P50 − measured median| / measured median (a
  point's median over its repeats: per-row error would only measure the noise);
* ``p99_coverage``: fraction of *rows* with ms <= P_tail + δ;
* ``pinball``: mean pinball loss per table quantile, over rows, in ms;
* ``tightness``: mean over rows of (P_tail + δ) / ms − 1;
* ``out_of_domain``: rows whose query lies outside the grid (clamped);
* ``rows``: rows evaluated.

Metrics the table cannot answer (no P50, or no tail/margin) are ``None``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from servecal.costmodels.samples import POINT_COLUMNS
from servecal.costmodels.table import CostTable

METRIC_KEYS = ("p50_mape", "p99_coverage", "pinball", "tightness", "out_of_domain", "rows")


def pinball_loss(y: np.ndarray, pred: np.ndarray, q: float) -> float:
    """Mean pinball (quantile) loss of ``pred`` as the ``q``-quantile of ``y``."""
    diff = y - pred
    return float(np.mean(np.maximum(q * diff, (q - 1.0) * diff)))


def upper_bound(table: CostTable, flat: np.ndarray) -> np.ndarray | None:
    """P_tail + δ at the given cells, computed exactly as predict() + margin()."""
    info = table.margin_info
    if info is None:
        return None
    tail = table.values(info.quantile).reshape(-1)[flat]
    return tail + info.rho * tail


def evaluate(table: CostTable, frame: pd.DataFrame) -> dict[str, Any]:
    """Accuracy of ``table`` on validated sample rows ``frame`` (see module docstring)."""
    if len(frame) == 0:
        raise ValueError("evaluate needs at least one row")
    cols = {c: frame[c].to_numpy(dtype=float) for c in POINT_COLUMNS}
    flat, out = table.cells(cols["n_decode"], cols["chunk"], cols["ctx"], cols["prefix"])
    ms = frame["ms"].to_numpy(dtype=float)

    p50_mape = None
    if 0.5 in table.quantiles:
        pred = table.values(0.5).reshape(-1)[flat]
        per_point = pd.DataFrame({"key": _point_keys(frame), "ms": ms, "p": pred})
        points = per_point.groupby("key", sort=False).agg(ms=("ms", "median"), p=("p", "first"))
        p50_mape = float(np.mean(np.abs(points["p"] - points["ms"]) / points["ms"]))

    pinball = {q: pinball_loss(ms, table.values(q).reshape(-1)[flat], q) for q in table.quantiles}
    bound = upper_bound(table, flat)
    return {
        "p50_mape": p50_mape,
        "p99_coverage": None if bound is None else float(np.mean(ms <= bound)),
        "pinball": pinball,
        "tightness": None if bound is None else float(np.mean(bound / ms - 1.0)),
        "out_of_domain": int(out.sum()),
        "rows": int(len(frame)),
    }


def _point_keys(frame: pd.DataFrame) -> np.ndarray:
    """One integer id per distinct (n_decode, chunk, ctx, prefix) point."""
    return frame.groupby(list(POINT_COLUMNS), sort=False).ngroup().to_numpy()
