"""Long-form export of a cost table (one row per grid cell) for analysis: Parquet or CSV."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from servecal.costmodels.atomic import atomic_path
from servecal.costmodels.errors import InputError
from servecal.costmodels.table import AXES, CostTable

FORMATS = ("parquet", "csv")


def long_form(table: CostTable) -> pd.DataFrame:
    """Columns: the four axes, ``p<q>`` per quantile (e.g. ``p50``, ``p99``), ``margin``,
    ``bound`` (P_tail + δ, when the table has a tail) and ``energy_j``."""
    mesh = np.meshgrid(*(np.asarray(v) for v in table.axes.values()), indexing="ij")
    frame = pd.DataFrame({a: m.reshape(-1) for a, m in zip(AXES, mesh, strict=True)})
    for q in table.quantiles:
        frame[f"p{q * 100:g}".replace(".", "_")] = table.values(q).reshape(-1)
    info = table.margin_info
    if info is not None:
        tail = table.values(info.quantile).reshape(-1)
        frame["margin"] = info.rho * tail
        frame["bound"] = tail + frame["margin"].to_numpy()
    energy = table.energy_values()
    frame["energy_j"] = np.nan if energy is None else energy.reshape(-1)
    return frame


def export_table(table: CostTable, path: str | os.PathLike[str], fmt: str) -> int:
    """Write the long form atomically as ``fmt``; returns the number of rows."""
    if fmt not in FORMATS:
        raise InputError(f"--format: unknown format '{fmt}' (choose {', '.join(FORMATS)})")
    frame = long_form(table)
    with atomic_path(path) as tmp:
        if fmt == "csv":
            frame.to_csv(tmp, index=False)
        else:
            frame.to_parquet(tmp, index=False)
    return len(frame)
