"""Export a cost table for other consumers: the long form (Parquet or CSV, one row per
grid cell) for analysis, NVIDIA Dynamo's mocker NPZ (:mod:`.export_dynamo`),
aiconfigurator's whole-forward-pass table (:mod:`.export_aic_fpm`), llm-d
inference-sim's latency knobs (:mod:`.export_llmd`) and, for vllm-ascend ≤ 0.23 only,
its dynamic-batch ``profile_table.csv`` (:mod:`.export_ascend`).

An exporter is a function ``(table, options: ExportOptions) -> Rendered`` (the
:class:`Exporter` protocol) that renders the file's bytes in memory; the formats are
the names of :data:`EXPORTERS` or a user's ``module:function`` (docs/plugins.md).
Adding a built-in format is one file and one line there. :func:`export_table` is
the one write path: it writes what an exporter rendered atomically, with its
provenance beside it (:func:`write_provenance`).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol

import numpy as np
import pandas as pd

from servecal.costmodels.table import AXES, CostTable
from servecal.plugins import Registry
from servecal.util.atomic import atomic_path, atomic_write_bytes
from servecal.util.errors import InputError

#: Provenance written beside every export (see :func:`write_provenance`).
PROVENANCE_SUFFIX = ".provenance.json"
EXPORT_SCHEMA = "servecal.export-provenance/1"


@dataclass(frozen=True)
class ExportOptions:
    """The options ``servecal export`` passes every exporter (each reads what it needs).

    ``max_num_batched_tokens`` caps vllm-ascend's ``chunk_size``; llm-d-sim fits its
    load factor at ``max_num_seqs`` and its decode knobs at ``decode_ctx`` (default:
    all the table's contexts), names the table as ``source`` in its header, and
    writes a fit over its error limit only with ``force``."""

    max_num_seqs: int = 256
    source: str = "a servecal cost table"
    max_num_batched_tokens: int | None = None
    decode_ctx: float | None = None
    force: bool = False
    # aic-fpm: the cell identity aiconfigurator matches (None: from the fingerprint)
    aic_system: str | None = None
    aic_version: str | None = None
    aic_model_path: str | None = None


class Rendered(NamedTuple):
    """An exporter's output: the file's bytes, its row count (in ``unit``s), notes, and
    files that go beside it: ``(suffix, bytes)``, written as the file's name with
    ``suffix`` in place of its own (aic-fpm's ``.metadata.json``), after it."""

    data: bytes
    rows: int
    notes: tuple[str, ...] = ()
    unit: str = "rows"
    extras: tuple[tuple[str, bytes], ...] = ()


class Exporter(Protocol):
    """Renders a cost table in one format (see the module docstring)."""

    def __call__(self, table: CostTable, options: ExportOptions) -> Rendered: ...


_E = "servecal.costmodels"
EXPORTERS = Registry(
    "exporter", "--format", "exporter(table, options) -> Rendered (docs/plugins.md)"
)
# fmt: off
EXPORTERS.add("parquet", f"{_E}.export:to_parquet", "long form, one row per grid cell (Parquet)")  # noqa: E501
EXPORTERS.add("csv", f"{_E}.export:to_csv", "long form, one row per grid cell (CSV)")
EXPORTERS.add("dynamo-mocker", f"{_E}.export_dynamo:render", "perf_data.npz of NVIDIA Dynamo's mocker (ai-dynamo 1.6.1)")  # noqa: E501
EXPORTERS.add("aic-fpm", f"{_E}.export_aic_fpm:render", "fpm_forward_perf.parquet + metadata of aiconfigurator's whole-forward-pass model")  # noqa: E501
EXPORTERS.add("llm-d-sim", f"{_E}.export_llmd:render", "latency knobs of llm-d's inference simulator, fitted by least squares")  # noqa: E501
EXPORTERS.add("vllm-ascend", f"{_E}.export_ascend:render", "legacy: profile_table.csv of vllm-ascend <= 0.23's dynamic-batch scheduler (removed upstream since)")  # noqa: E501
# fmt: on
#: Formats whose reader takes only a file of this suffix (the mocker's
#: ``is_mocker_format_npz``; aiconfigurator's Parquet file, its sidecar named after it).
REQUIRED_SUFFIX = {"dynamo-mocker": ".npz", "aic-fpm": ".parquet"}
#: The built-in format names.
FORMATS = EXPORTERS.names()


class Exported(NamedTuple):
    """What :func:`export_table` wrote: rows (lines of knobs for llm-d-sim) and notes,
    one line each, for the user (fit errors, what a column means)."""

    rows: int
    notes: tuple[str, ...] = ()
    unit: str = "rows"  # what ``rows`` counts ("lines" for llm-d-sim's knobs)


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


def to_parquet(table: CostTable, options: ExportOptions) -> Rendered:
    """The long form as Parquet."""
    frame = long_form(table)
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return Rendered(buffer.getvalue(), len(frame))


def to_csv(table: CostTable, options: ExportOptions) -> Rendered:
    """The long form as CSV."""
    frame = long_form(table)
    return Rendered(frame.to_csv(index=False).encode(), len(frame))


def export_table(
    table: CostTable,
    path: str | os.PathLike[str],
    fmt: str,
    **options: object,
) -> Exported:
    """Write ``table`` as ``fmt`` (a name of :data:`EXPORTERS` or ``module:function``)
    at ``path``, atomically, and its provenance beside it (:func:`write_provenance`).

    ``options`` are :class:`ExportOptions`' fields. An exporter refusing the table
    (llm-d-sim: a fit whose RMS error exceeds
    :data:`~servecal.costmodels.export_llmd.MAX_FIT_RMS`, unless ``force``) raises
    :class:`InputError` and nothing is written.
    """
    if fmt not in EXPORTERS and ":" not in fmt:
        raise InputError(f"--format: unknown format '{fmt}' (choose {EXPORTERS.usages()})")
    suffix = REQUIRED_SUFFIX.get(fmt)
    if suffix and Path(path).suffix != suffix:
        raise InputError(f"--out {path}: {fmt} is read only from a file named *{suffix}")
    out = EXPORTERS.call(fmt, table, ExportOptions(**options))  # type: ignore[arg-type]
    if not isinstance(out, Rendered):
        raise InputError(
            f"--format {fmt}: the exporter returned {type(out).__name__}, not a Rendered"
        )
    with atomic_path(path) as tmp:
        tmp.write_bytes(out.data)
    for suffix, data in out.extras:  # after the file: a sidecar may be its commit record
        atomic_write_bytes(extra_path(path, suffix), data)
    write_provenance(path, table)
    return Exported(out.rows, tuple(out.notes), out.unit)


def extra_path(path: str | os.PathLike[str], suffix: str) -> Path:
    """Where an exporter's extra file goes: ``FILE`` with ``suffix`` for its suffix."""
    p = Path(path)
    return p.with_name(p.stem + suffix)


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
