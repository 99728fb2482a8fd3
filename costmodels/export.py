"""Long-form export of a cost table (one row per grid cell) for analysis: Parquet or CSV."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from servecal.costmodels.atomic import atomic_path, atomic_write_bytes
from servecal.costmodels.errors import InputError
from servecal.costmodels.table import AXES, CostTable

FORMATS = ("parquet", "csv")
#: Provenance written beside every export (see :func:`write_provenance`).
PROVENANCE_SUFFIX = ".provenance.json"
EXPORT_SCHEMA = "servecal.export-provenance/1"


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
    """Write the long form atomically as ``fmt``, and its provenance beside it
    (:func:`write_provenance`); returns the number of rows."""
    if fmt not in FORMATS:
        raise InputError(f"--format: unknown format '{fmt}' (choose {', '.join(FORMATS)})")
    frame = long_form(table)
    with atomic_path(path) as tmp:
        if fmt == "csv":
            frame.to_csv(tmp, index=False)
        else:
            frame.to_parquet(tmp, index=False)
    write_provenance(path, table)
    return len(frame)


def provenance_path(path: str | os.PathLike[str]) -> Path:
    """Where :func:`write_provenance` puts an export's provenance: ``FILE.provenance.json``."""
    p = Path(path)
    return p.with_name(p.name + PROVENANCE_SUFFIX)


def write_provenance(path: str | os.PathLike[str], table: CostTable) -> Path:
    """Beside an exported file (any format): the SHA-256 of its bytes (``sha256sum``
    checks it too), and the content hash and fingerprint of the table it came from."""
    p = Path(path)
    digest = hashlib.sha256(p.read_bytes()).hexdigest()
    doc = {
        "schema": EXPORT_SCHEMA,
        "file": p.name,
        "file_sha256": f"sha256:{digest}",
        "table_content_hash": table.content_hash(),
        "fingerprint": table.fingerprint,
    }
    side = provenance_path(p)
    atomic_write_bytes(side, (json.dumps(doc, indent=1, default=str) + "\n").encode())
    return side
