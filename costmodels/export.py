"""Export a cost table for other consumers: the long form (Parquet or CSV, one row per
grid cell) for analysis, vllm-ascend's dynamic-batch ``profile_table.csv``
(:mod:`.export_ascend`), llm-d inference-sim's latency knobs (:mod:`.export_llmd`).

:func:`export_table` is the one write path: every format is built in memory and
written atomically there, with its provenance beside it (:func:`write_provenance`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from servecal.costmodels.atomic import atomic_path, atomic_write_bytes
from servecal.costmodels.errors import InputError
from servecal.costmodels.table import AXES, CostTable

FORMATS = ("parquet", "csv", "vllm-ascend", "llm-d-sim")
#: Provenance written beside every export (see :func:`write_provenance`).
PROVENANCE_SUFFIX = ".provenance.json"
EXPORT_SCHEMA = "servecal.export-provenance/1"


class Exported(NamedTuple):
    """What :func:`export_table` wrote: rows (lines of knobs for llm-d-sim) and notes,
    one line each, for the user (fit errors, what a column means)."""

    rows: int
    notes: tuple[str, ...] = ()


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


def export_table(
    table: CostTable,
    path: str | os.PathLike[str],
    fmt: str,
    *,
    max_num_seqs: int = 256,
    source: str = "a servecal cost table",
    max_num_batched_tokens: int | None = None,
    decode_ctx: float | None = None,
    force: bool = False,
) -> Exported:
    """Write ``table`` as ``fmt`` at ``path``, atomically, and its provenance beside it
    (:func:`write_provenance`).

    vllm-ascend: ``max_num_batched_tokens`` caps the written ``chunk_size``. llm-d-sim:
    ``max_num_seqs`` is the simulator's concurrency limit the load factor is fitted
    against, ``decode_ctx`` the one context the decode knobs are fitted at (default:
    all the table's), ``source`` names the table in the header; a fit whose RMS error
    exceeds :data:`~servecal.costmodels.export_llmd.MAX_FIT_RMS` raises
    :class:`InputError` (nothing written) unless ``force`` (then a ``NoticeWarning``).
    """
    if fmt not in FORMATS:
        raise InputError(f"--format: unknown format '{fmt}' (choose {', '.join(FORMATS)})")
    notes: list[str] = []
    text: str | None = None
    frame: pd.DataFrame | None = None
    if fmt == "vllm-ascend":
        from servecal.costmodels.export_ascend import ascend_profile

        frame, notes = ascend_profile(table, max_num_batched_tokens)
    elif fmt == "llm-d-sim":
        from servecal.costmodels.export_llmd import (
            check_fit,
            fit_notes,
            fit_sim_profile,
            sim_yaml,
        )

        profile = fit_sim_profile(table, max_num_seqs, decode_ctx)
        check_fit(profile, force)
        notes = fit_notes(profile)
        text = sim_yaml(profile, source)
    else:
        frame = long_form(table)
    with atomic_path(path) as tmp:
        if text is not None:
            tmp.write_text(text)
        elif fmt == "parquet":
            frame.to_parquet(tmp, index=False)
        elif fmt == "vllm-ascend":
            from servecal.costmodels.export_ascend import COST_DECIMALS

            frame.to_csv(tmp, index=False, float_format=f"%.{COST_DECIMALS}f")
        else:
            frame.to_csv(tmp, index=False)
    write_provenance(path, table)
    rows = len(frame) if frame is not None else text.count("\n")
    return Exported(rows, tuple(notes))


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
