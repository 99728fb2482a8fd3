"""The tail of a segmented table: rows already in the kernel, not yet in a part.

A live server's run log appends a Parquet part every few seconds
(:mod:`servecal.costmodels.segments`), which a stop that comes between two parts
would lose: vLLM's API server kills its engine process 0 s after asking it to stop
(docs/vllm.md). So the log also appends every row, as it is logged, to a hidden
*tail* file beside the parts, one ``write()`` per row: once ``write()`` returns the
row is in the kernel's page cache, and no stop of the process — ``SIGTERM``, an
exception, ``SIGKILL`` — takes it back (only the machine going down does, as for the
parts). When a part holding the rows is written, the writer starts a new tail file
and deletes the old one.

A tail file is one JSON header line (``format``, ``key``, ``columns``, ``dtypes``,
``encoding``) and then its rows: ``f8``, one little-endian float64 per column per row
(the serving loop's cheap case, a few hundred ns to pack), or ``json``, one JSON
object per line. Readers (:func:`read_tail`) take the rows whose ``key`` no part
holds (a stop between a part's rename and the old tail's deletion leaves rows in
both) and drop a last row cut short.

pyarrow and pandas skip hidden files, so they read a folder's parts alone;
:func:`servecal.costmodels.segments.read_table` reads the parts and the tail.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from servecal.util.atomic import file_mode

#: The header's ``format``.
TAIL_FORMAT = "servecal.tail/1"
#: Tail files' names start so (hidden: pyarrow, pandas and :func:`segments.parts`
#: skip them).
TAIL_PREFIX = ".tail-"


def _plain(value: Any) -> Any:
    """A JSON-ready scalar (numpy's own become Python's)."""
    return value.item() if hasattr(value, "item") else value


class TailWriter:
    """Appends rows of one table to its current tail file, one ``write()`` each.

    Not thread-safe on its own: the caller appends and rotates under its own lock. A
    write that fails (a full disk) is not raised into the caller, a serving loop: the
    tail stops there and :attr:`error` says why (the parts go on as before).
    """

    def __init__(
        self,
        table_dir: Path,
        columns: Sequence[str],
        dtypes: Sequence[str],
        key: str,
        encoding: str,
    ) -> None:
        if encoding not in ("f8", "json"):
            raise ValueError(f"tail encoding {encoding!r}: f8 or json")
        self.table_dir = Path(table_dir)
        self.columns = tuple(columns)
        self._header = (
            json.dumps(
                {
                    "format": TAIL_FORMAT,
                    "key": key,
                    "columns": list(columns),
                    "dtypes": list(dtypes),
                    "encoding": encoding,
                }
            )  # fmt: skip
            + "\n"
        ).encode()
        self._encoding = encoding
        self._pack = struct.Struct(f"<{len(self.columns)}d").pack
        self._seq = 0
        self._fd = -1
        self.error: OSError | None = None
        self.path = self._open()

    def _open(self) -> Path:
        path = self.table_dir / f"{TAIL_PREFIX}{self._seq:06d}.{self._encoding}"
        self._seq += 1
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, file_mode())
        os.write(self._fd, self._header)
        return path

    def append_floats(self, values: Sequence[float]) -> None:
        """One row of an ``f8`` tail (``len(columns)`` numbers)."""
        self._write(self._pack(*values))

    def append_row(self, row: Mapping[str, Any]) -> None:
        """One row of a ``json`` tail (a value for each column)."""
        self._write((json.dumps([_plain(row[c]) for c in self.columns]) + "\n").encode())

    def _write(self, data: bytes) -> None:
        if self.error is not None:
            return
        try:
            os.write(self._fd, data)
        except OSError as exc:
            self.error = exc

    def rotate(self) -> Path:
        """Start a new tail file; the old one's path (delete it once its rows are in a
        part)."""
        old = self.path
        self._close_fd()
        if self.error is None:
            try:
                self.path = self._open()
            except OSError as exc:
                self.error = exc
        return old

    def _close_fd(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):  # a descriptor that already failed
                os.close(self._fd)
            self._fd = -1

    def close(self, remove: bool) -> None:
        """Close the current file; ``remove``: every row is in parts, so every tail
        file of the folder goes."""
        self._close_fd()
        if remove:
            for path in tail_files(self.table_dir):
                path.unlink(missing_ok=True)


def tail_files(table_dir: Path) -> list[Path]:
    """A folder's tail files, oldest first."""
    if not table_dir.is_dir():
        return []
    return sorted(table_dir.glob(f"{TAIL_PREFIX}*"))


def _rows_of(path: Path) -> tuple[dict[str, Any], list[list[Any]]]:
    """A tail file's header and rows (a row cut short by a stop is dropped)."""
    data = path.read_bytes()
    cut = data.find(b"\n")
    if cut < 0:
        return {}, []  # the header itself never made it
    header = json.loads(data[:cut])
    body = data[cut + 1 :]
    n = len(header["columns"])
    if header["encoding"] == "f8":
        size = 8 * n
        whole = len(body) - len(body) % size
        values = struct.unpack(f"<{whole // 8}d", body[:whole])
        return header, [list(values[i : i + n]) for i in range(0, len(values), n)]
    rows = []
    for line in body.split(b"\n"):
        try:
            row = json.loads(line)
        except ValueError:
            continue  # the empty string after the last newline, or a line cut short
        if isinstance(row, list) and len(row) == n:
            rows.append(row)
    return header, rows


def read_tail(table_dir: Path, held: set[Any]) -> Any:
    """The tail's rows whose key is not in ``held`` (the parts' keys), as a pandas
    frame in the header's dtypes; ``None`` when there are none."""
    import pandas as pd

    header: dict[str, Any] = {}
    rows: list[list[Any]] = []
    for path in tail_files(table_dir):
        head, got = _rows_of(path)
        if got:
            header = head
            rows += got
    if not rows:
        return None
    frame = pd.DataFrame(rows, columns=header["columns"])
    for name, dtype in zip(header["columns"], header["dtypes"], strict=True):
        frame[name] = frame[name].astype(dtype)
    key = header["key"]
    frame = frame[~frame[key].isin(held)].drop_duplicates(subset=key, keep="first")
    return frame.reset_index(drop=True) if len(frame) else None
