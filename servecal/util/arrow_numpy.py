"""numpy ⇄ Arrow for plain columns, without pyarrow's pandas hook.

pyarrow imports pandas (when installed) on almost any numpy conversion
(``pa.array``, ``Array.to_numpy``: its pandas shim checks for pandas types first),
and importing pandas is a third of a short ``servecal simulate``'s wall time. The
simulate path reads traces and samples and writes run folders through these two
functions instead: they move the column's memory through Arrow's buffers (the
Arrow columnar format: a validity bitmap and a data buffer, or offsets and bytes
for strings). Types they do not handle go through pyarrow's own conversion.

* :func:`to_numpy`: integers, floats, booleans, timestamps (as int64 ticks) and
  all-null columns; a missing value becomes NaN (integers turn float, as in
  ``to_numpy``). Other types (strings, ...) go through ``to_numpy``.
* :func:`from_numpy`: int/float/bool arrays and object (or unicode) arrays of
  strings and None; NaN and None are written as null, as pandas' ``to_parquet``
  does. Other object arrays go through ``pa.array(..., from_pandas=True)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _bits(buffer: Any, offset: int, n: int) -> np.ndarray:
    """A little-endian bitmap as booleans."""
    raw = np.frombuffer(buffer, dtype=np.uint8)
    return np.unpackbits(raw, bitorder="little")[offset : offset + n].astype(bool)


def _packed(flags: np.ndarray) -> Any:
    import pyarrow as pa

    return pa.py_buffer(np.packbits(flags, bitorder="little"))


def _single(column: Any) -> Any:
    """One array of a (chunked) column."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks == 1:
            return column.chunk(0)
        if column.num_chunks == 0:
            return pa.array([], type=column.type)
        return pa.concat_arrays(column.chunks)
    return column


def to_numpy(column: Any) -> np.ndarray:
    """A pyarrow (chunked) array as numpy; a missing value is NaN (module docstring)."""
    import pyarrow as pa

    arr = _single(column)
    t, n, off = arr.type, len(arr), arr.offset
    if pa.types.is_null(t):
        return np.full(n, np.nan)
    if pa.types.is_boolean(t):
        values = _bits(arr.buffers()[1], off, n)
    elif pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_timestamp(t):
        kind = "f" if pa.types.is_floating(t) else "u" if pa.types.is_unsigned_integer(t) else "i"
        dtype = np.dtype(f"{kind}{t.bit_width // 8}")
        data = arr.buffers()[1]
        values = (
            np.frombuffer(data, dtype=dtype, count=off + n)[off:]
            if data is not None
            else np.zeros(n, dtype=dtype)
        )
    else:
        return arr.to_numpy(zero_copy_only=False)
    if not arr.null_count:
        return values.copy()
    valid = _bits(arr.buffers()[0], off, n)
    out = values.astype(float)
    out[~valid] = np.nan
    return out


def _strings(values: np.ndarray) -> Any | None:
    """An Arrow string array of ``values`` (str or None each), or None when they are not."""
    import pyarrow as pa

    if not all(v is None or isinstance(v, str) for v in values):
        return None
    valid = np.array([v is not None for v in values], dtype=bool)
    encoded = [v.encode() if v is not None else b"" for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    buffers = [
        None if valid.all() else _packed(valid),
        pa.py_buffer(offsets),
        pa.py_buffer(b"".join(encoded)),
    ]
    return pa.Array.from_buffers(pa.string(), len(encoded), buffers)


def from_numpy(values: np.ndarray) -> Any:
    """A numpy column as a pyarrow array; NaN and None become null (module docstring)."""
    import pyarrow as pa

    a = np.asarray(values)
    n = a.size
    if a.dtype == bool:
        return pa.Array.from_buffers(pa.bool_(), n, [None, _packed(a)])
    if a.dtype.kind in "iuf" and a.dtype.byteorder in "=|":
        kind = {"i": "int", "u": "uint", "f": "float"}[a.dtype.kind]
        arrow_type = getattr(pa, f"{kind}{a.dtype.itemsize * 8}")()
        data = pa.py_buffer(np.ascontiguousarray(a))
        valid = ~np.isnan(a) if a.dtype.kind == "f" else None
        mask = None if valid is None or valid.all() else _packed(valid)
        return pa.Array.from_buffers(arrow_type, n, [mask, data])
    if a.dtype.kind in "OU":
        strings = _strings(a.astype(object))
        if strings is not None:
            return strings
    return pa.array(a, from_pandas=True)


def arrow_table(columns: dict[str, np.ndarray]) -> Any:
    """Numpy ``columns`` (name → values, in order) as a pyarrow table."""
    import pyarrow as pa

    arrays = [from_numpy(values) for values in columns.values()]
    return pa.Table.from_arrays(arrays, names=list(columns))


def write_parquet(columns: dict[str, np.ndarray], path: Any) -> None:
    """Write numpy ``columns`` (name → values, in order) as one Parquet file."""
    import pyarrow.parquet as pq

    pq.write_table(arrow_table(columns), path)


def read_parquet(path: Any) -> Any:
    """A Parquet file as a pyarrow table (``ParquetFile``: ``read_table``'s dataset
    layer imports pandas)."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).read()
