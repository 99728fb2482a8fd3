"""The samples contract (docs/design.md "Samples"): read, validate and write timed-iteration rows.

One row per timed iteration. Required columns are :data:`SAMPLE_COLUMNS`; the
optional device-state columns are :data:`OPTIONAL_COLUMNS`; other columns are kept
untouched. Provenance (device, driver, model shape, ...) travels in the Parquet schema
metadata and in a sidecar beside the file under the file's own name (``X.parquet`` →
``X.fingerprint.json``, :func:`fingerprint_path`), so CSV files carry it too and any
number of samples files share a folder. Folders written before that hold one
``fingerprint.json`` for their samples: it is still read, never written.

Every defect raises :class:`InputError` with one line naming the file, the column and
the first bad row (rows are counted from 0, header excluded).
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from servecal.util.atomic import atomic_path, atomic_write_bytes, is_special
from servecal.util.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

SAMPLES_SCHEMA = "servecal.samples/1"
#: Required columns, in the order they are written.
SAMPLE_COLUMNS = ("n_decode", "chunk", "ctx", "prefix", "ms", "energy_j", "rep")
#: Optional device-state columns (nulls allowed).
OPTIONAL_COLUMNS = ("power_w", "sm_clock_mhz", "temp_c", "throttle", "ts")
#: Integer count columns (must hold whole numbers >= 0).
COUNT_COLUMNS = ("n_decode", "chunk", "ctx", "prefix", "rep")
#: Largest count a row may hold (beyond it int64 and float64 disagree).
MAX_COUNT = 2**53
#: The grid coordinates of a row.
POINT_COLUMNS = ("n_decode", "chunk", "ctx", "prefix")

#: Parquet schema-metadata keys.
META_SCHEMA = b"servecal.schema"
META_PROVENANCE = b"servecal.provenance"
#: A samples file's sidecar: ``X.parquet`` → ``X.fingerprint.json``.
SIDECAR_SUFFIX = ".fingerprint.json"
#: The one sidecar per folder that older servecal wrote (read when a file has none).
LEGACY_FINGERPRINT_FILE = "fingerprint.json"


def fingerprint_path(samples: str | os.PathLike[str]) -> Path:
    """Where :func:`write_samples` puts the provenance of ``samples`` beside it."""
    p = Path(samples)
    return p.with_name(p.stem + SIDECAR_SUFFIX)


def find_fingerprint(samples: str | os.PathLike[str]) -> Path | None:
    """The sidecar describing ``samples``: its own (:func:`fingerprint_path`), else an
    older folder's ``fingerprint.json``; ``None`` when there is neither."""
    own = fingerprint_path(samples)
    if own.exists():
        return own
    legacy = Path(samples).parent / LEGACY_FINGERPRINT_FILE
    return legacy if legacy.exists() else None


@dataclass(frozen=True)
class Samples:
    """Validated rows plus the provenance dict that came with them."""

    frame: pd.DataFrame
    provenance: dict[str, Any] = field(default_factory=dict)


def _fail(source: str, column: str, row: int | None, what: str, count: int = 1) -> InputError:
    where = f"column '{column}'" + (f", row {row}" if row is not None else "")
    more = f" ({count} bad rows)" if count > 1 else ""
    return InputError(f"{source}: {where}: {what}{more}")


def _first_bad(mask: np.ndarray) -> tuple[int, int]:
    bad = np.flatnonzero(mask)
    return int(bad[0]), int(bad.size)


def _numeric(frame: pd.DataFrame, col: str, source: str) -> np.ndarray:
    """The column as float64; values that are present but not numbers are a defect."""
    import pandas as pd

    raw = frame[col]
    if pd.api.types.is_bool_dtype(raw) or (
        raw.dtype == object and raw.map(lambda v: isinstance(v, (bool, np.bool_))).any()
    ):
        raise _fail(source, col, None, "stored as true/false, expected numbers")
    kind = pd.api.types
    if (
        kind.is_datetime64_any_dtype(raw)
        or kind.is_timedelta64_dtype(raw)
        or (raw.dtype == object and raw.map(lambda v: hasattr(v, "timetuple")).any())
    ):  # would read as nanoseconds since 1970
        raise _fail(source, col, None, f"stored as dates/times ({raw.dtype}), expected numbers")
    values = pd.to_numeric(raw, errors="coerce")
    unparsable = (values.isna() & raw.notna()).to_numpy()
    if unparsable.any():
        row, count = _first_bad(unparsable)
        raise _fail(source, col, row, f"not a number: {raw.iloc[row]!r}", count)
    return values.to_numpy(dtype=float, na_value=np.nan)


def check_samples(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    """Check ``frame`` against the samples contract; return it with canonical dtypes.

    Counts become ``int64``, ``ms`` and ``energy_j`` ``float64`` (``energy_j`` may be
    null: no meter). Raises :class:`InputError` naming ``source``, the column and the
    first bad row.
    """
    columns = [str(c) for c in frame.columns]
    _check_present(columns, len(frame), source)
    out = frame.copy()
    present = [c for c in OPTIONAL_COLUMNS if c in columns]
    for col, values in _checked(lambda col: _numeric(frame, col, source), present, source):
        out[col] = values
    return out.reset_index(drop=True)


def _check_present(columns: list[str], rows: int, source: str) -> None:
    """Every required column is there, and there is a row."""
    for col in SAMPLE_COLUMNS:
        if col not in columns:
            extra = [c for c in columns if c not in SAMPLE_COLUMNS + OPTIONAL_COLUMNS]
            close = difflib.get_close_matches(col, extra, n=1)
            hint = f" (found '{close[0]}': misspelt?)" if close else ""
            raise InputError(f"{source}: column '{col}': missing{hint}")
    if rows == 0:
        raise InputError(f"{source}: column '{SAMPLE_COLUMNS[0]}': no rows (empty samples)")


def _checked(
    numeric: Callable[[str], np.ndarray], optional: list[str], source: str
) -> list[tuple[str, np.ndarray]]:
    """The contract's checks on float columns (``numeric(col)``: NaN = missing), in
    column order; the canonical columns (counts ``int64``) or the first defect."""
    out: list[tuple[str, np.ndarray]] = []
    for col in COUNT_COLUMNS:
        values = numeric(col)
        if np.isnan(values).any():
            row, count = _first_bad(np.isnan(values))
            raise _fail(source, col, row, "missing value (NaN)", count)
        whole = np.isfinite(values) & (values == np.round(values))
        if not whole.all():
            row, count = _first_bad(~whole)
            raise _fail(source, col, row, f"not a whole number: {float(values[row])!r}", count)
        if (values < 0).any():
            row, count = _first_bad(values < 0)
            raise _fail(source, col, row, f"negative count: {int(values[row])}", count)
        if (values > MAX_COUNT).any():
            row, count = _first_bad(values > MAX_COUNT)
            raise _fail(source, col, row, f"count too large: {float(values[row]):.3g}", count)
        out.append((col, values.astype(np.int64)))

    ms = numeric("ms")
    if np.isnan(ms).any():
        row, count = _first_bad(np.isnan(ms))
        raise _fail(source, "ms", row, "missing value (NaN)", count)
    bad = ~np.isfinite(ms) | (ms <= 0)
    if bad.any():
        row, count = _first_bad(bad)
        raise _fail(source, "ms", row, f"must be a finite time > 0, got {float(ms[row])!r}", count)
    out.append(("ms", ms))

    energy = numeric("energy_j")  # NaN = no meter
    bad = ~np.isnan(energy) & (~np.isfinite(energy) | (energy < 0))
    if bad.any():
        row, count = _first_bad(bad)
        raise _fail(
            source, "energy_j", row, f"must be >= 0 or null, got {float(energy[row])!r}", count
        )
    out.append(("energy_j", energy))

    counts = dict(out)
    empty = (counts["n_decode"] + counts["chunk"]) == 0
    if empty.any():
        row, count = _first_bad(empty)
        raise _fail(source, "n_decode+chunk", row, "iteration with no tokens (must be >= 1)", count)
    out += [(col, numeric(col)) for col in optional]
    return out


def _provenance_from_parquet(path: Path, metadata: dict[bytes, bytes] | None) -> dict[str, Any]:
    meta = metadata or {}
    schema = meta.get(META_SCHEMA)
    if schema is not None and schema.decode() != SAMPLES_SCHEMA:
        raise InputError(
            f"{path}: column '(schema)': wrong schema version '{schema.decode()}', "
            f"expected '{SAMPLES_SCHEMA}'"
        )
    raw = meta.get(META_PROVENANCE)
    if raw is None:
        return {}
    try:
        prov = json.loads(raw)
    except (ValueError, RecursionError):
        raise InputError(f"{path}: column '(metadata)': provenance is not valid JSON") from None
    return prov if isinstance(prov, dict) else {}


def _provenance_from_sidecar(path: Path) -> dict[str, Any] | None:
    sidecar = find_fingerprint(path)
    if sidecar is None:
        return None
    try:
        prov = json.loads(sidecar.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise InputError(f"{sidecar}: unreadable fingerprint ({type(exc).__name__})") from None
    if not isinstance(prov, dict):
        raise InputError(f"{sidecar}: fingerprint must be a JSON object")
    schema = prov.get("schema", SAMPLES_SCHEMA)
    if schema != SAMPLES_SCHEMA:
        raise InputError(
            f"{sidecar}: column '(schema)': wrong schema version '{schema}', "
            f"expected '{SAMPLES_SCHEMA}'"
        )
    return prov


def _read_frame(path: Path) -> tuple[pd.DataFrame, dict[str, Any] | None]:
    """Raw frame plus Parquet provenance (``None`` for CSV)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.suffix.lower() in (".csv", ".txt"):
        try:
            return pd.read_csv(path), None
        except pd.errors.EmptyDataError:
            raise InputError(f"{path}: column '(all)': empty file") from None
        except (OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:
            raise InputError(f"{path}: unreadable CSV ({type(exc).__name__})") from None
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{path}: unreadable Parquet ({type(exc).__name__})") from None
    prov = _provenance_from_parquet(path, table.schema.metadata)
    return table.to_pandas(), prov


def read_samples(path: str | os.PathLike[str]) -> Samples:
    """Read and validate samples from Parquet (or ``.csv``), with their provenance.

    Provenance comes from the Parquet schema metadata, else from the file's sidecar
    (:func:`find_fingerprint`, which also carries a CSV file's provenance).
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    if p.stat().st_size == 0:
        raise InputError(f"{p}: column '(all)': empty file")
    frame, prov = _read_frame(p)
    sidecar = _provenance_from_sidecar(p)
    if not prov and sidecar is not None:
        prov = sidecar
    prov = dict(prov or {})
    prov.pop("schema", None)
    return Samples(frame=check_samples(frame, str(p)), provenance=prov)


def read_sample_columns(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The required columns (:data:`SAMPLE_COLUMNS`) of a samples file, validated, as
    numpy arrays: what a simulation's samples truth reads at every start.

    A Parquet file whose columns are numbers (as :func:`write_samples` writes them)
    is read and checked without pandas (the same checks as :func:`read_samples`);
    any other file goes through :func:`read_samples`.
    """
    import pyarrow as pa

    from servecal.util.arrow_numpy import read_parquet, to_numpy

    p = Path(path)
    if p.suffix.lower() not in (".csv", ".txt") and p.is_file():
        try:
            table = read_parquet(p)
        except (OSError, pa.ArrowException):
            table = None  # read_samples says what is wrong
        if table is not None and _numbers_only(table):
            _provenance_from_parquet(p, table.schema.metadata)  # a wrong schema is refused
            _check_present(table.column_names, table.num_rows, str(p))

            def numeric(col: str) -> np.ndarray:
                return to_numpy(table.column(col)).astype(float)

            return dict(_checked(numeric, [], str(p)))
    frame = read_samples(p).frame
    return {col: frame[col].to_numpy() for col in SAMPLE_COLUMNS}


def _numbers_only(table: Any) -> bool:
    """Whether each required column present in ``table`` holds integers or floats."""
    import pyarrow as pa

    types = [table.schema.field(c).type for c in SAMPLE_COLUMNS if c in table.column_names]
    return all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in types)


def read_provenance(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The provenance of a samples file without reading its rows (Parquet metadata,
    else its sidecar, :func:`find_fingerprint`; ``{}`` when neither says anything)."""
    p = Path(path)
    prov: dict[str, Any] | None = None
    if p.suffix.lower() not in (".csv", ".txt"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            metadata = pq.read_schema(p).metadata
        except (OSError, pa.ArrowException) as exc:
            raise InputError(f"{p}: unreadable Parquet ({type(exc).__name__})") from None
        prov = _provenance_from_parquet(p, metadata)
    if not prov:
        prov = _provenance_from_sidecar(p)
    prov = dict(prov or {})
    prov.pop("schema", None)
    return prov


def write_samples(
    frame: pd.DataFrame, path: str | os.PathLike[str], provenance: dict[str, Any]
) -> None:
    """Validate and write samples atomically as Parquet (provenance in its schema
    metadata), plus its sidecar ``X.fingerprint.json`` beside it (:func:`fingerprint_path`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = Path(path)
    if p.name == LEGACY_FINGERPRINT_FILE or p.name.endswith(SIDECAR_SUFFIX):
        raise InputError(
            f"{p}: that name is a samples file's sidecar ({SIDECAR_SUFFIX}); "
            "name the samples file e.g. samples.parquet"
        )
    clean = check_samples(frame, str(p))
    ordered = list(SAMPLE_COLUMNS) + [c for c in clean.columns if c not in SAMPLE_COLUMNS]
    table = pa.Table.from_pandas(clean[ordered], preserve_index=False)
    prov_json = json.dumps(provenance, sort_keys=True, default=str)
    meta = dict(table.schema.metadata or {})
    meta[META_SCHEMA] = SAMPLES_SCHEMA.encode()
    meta[META_PROVENANCE] = prov_json.encode()
    table = table.replace_schema_metadata(meta)

    with atomic_path(p) as tmp:
        pq.write_table(table, tmp)
    if is_special(p):  # /dev/null, a pipe: no folder of its own for a sidecar
        return
    sidecar = {"schema": SAMPLES_SCHEMA, **json.loads(prov_json)}
    atomic_write_bytes(
        fingerprint_path(p), (json.dumps(sidecar, indent=2, sort_keys=True) + "\n").encode()
    )
