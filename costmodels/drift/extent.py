"""Drifted regions found from the data: the points that reject, and their extent.

The fixed bands of :class:`~servecal.costmodels.drift.gate.Bands` mix drifted and
undrifted points when a drift's edge falls inside one (chunk ≥ 64 on a 16-128
grid: one ``chunk 1-255`` band). Here the region is what the per-point tests
(:mod:`~servecal.costmodels.drift.pointwise`) rejected: per direction, the points
Holm rejects, their extent along each axis (the smallest box holding them), how
many checked points that box holds (all of them rejected: the box *is* the drift;
fewer: it is patchy) and their median shift.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

AXES = ("n_decode", "chunk", "ctx", "prefix")


def point_regions(
    rows: pd.DataFrame,
    cluster_of_row: np.ndarray,
    rejected: dict[str, np.ndarray],
    cluster_median: np.ndarray,
    hit: np.ndarray | None,
    units: str,
) -> list[dict[str, Any]]:
    """One region per direction with rejected points (``rejected``: direction → a mask
    over clusters), described by its extent on each axis of ``rows``; ``units``: what a
    cluster is called, plural ("grid points")."""
    out = []
    values = {a: rows[a].to_numpy(dtype=float) for a in AXES if a in rows}
    for direction, mask in rejected.items():
        if not mask.any():
            continue
        mine = mask[cluster_of_row]
        extent = {a: [int(v[mine].min()), int(v[mine].max())] for a, v in values.items()}
        in_box = np.ones(len(rows), dtype=bool)
        for a, (lo, hi) in extent.items():
            in_box &= (values[a] >= lo) & (values[a] <= hi)
        box_points = int(np.unique(cluster_of_row[in_box]).size)
        k = int(mask.sum())
        where = ", ".join(
            f"{a} {lo}" if lo == hi else f"{a} {lo}-{hi}" for a, (lo, hi) in extent.items()
        )
        out.append(
            {
                "region": f"{direction} at {k} of the {box_points} {units} in {where}",
                "axis": "points",
                "status": "drift",
                "direction": direction,
                "range": None,
                "extent": extent,
                "points": k,
                "points_in_extent": box_points,
                "rows": int(mine.sum()),
                "factor": math.exp(float(np.median(cluster_median[mask]))),
                "coverage": None if hit is None else 1.0 - float(hit[mine].mean()),
                "p_value": None,
            }
        )
    return out
