"""Iteration rows streamed to a Parquet file as the run goes (``--stream-iterations``).

A long run's iterations outnumber its requests ~15 to 1, and the engine kept one
tuple per iteration until :func:`~servecal.sched.result.build_result` made the
frame. With a stream the engine's :class:`~servecal.sched.engine.IterationLog`
holds at most :data:`BATCH` rows: each full batch becomes one Parquet row group
(the same columns, dtypes and nulls as the whole-run frame written at the end),
and the log keeps only what the request rows need of every iteration (its
duration, 8 bytes). The file's content equals the file a kept run writes.

The file is written under a hidden temporary name from :func:`tempfile.mkstemp`
(``.iterations.<random>.tmp``, which :func:`~servecal.sched.runfolder.is_temporary`
names a writer's leftover) and only
gets its Parquet footer when the run finishes: an interrupted run leaves no file
that reads as complete, and the next command into the folder removes it.
:func:`~servecal.sched.runfolder.write_run` moves the finished file into the run
folder it writes (under its own temporary name, renamed into place whole).

Logged predictions (``pred_p50_ms``, ...) are computed per batch on a copy of the
predictor, so the run's own beyond-the-grid counts are the policy's queries only,
as in a kept run (where they are read before the log is priced).
"""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

#: Rows per Parquet row group (and at most this many rows held in memory).
BATCH = 65_536


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class IterationStream:
    """Writes iteration rows (``ROW_COLUMNS`` tuples) to ``path`` in row groups.

    ``rows``: the batch being filled (the engine appends to it; :meth:`record`
    flushes it when full)."""

    def __init__(
        self, path: str | os.PathLike[str], predictor: Any, batch: int | None = None
    ) -> None:
        self.path = Path(path)
        self.rows: list[tuple[Any, ...]] = []
        self._predictor = copy.deepcopy(predictor)  # its clamped-query counts stay the run's
        self._batch = batch or BATCH
        self._writer: Any = None
        self.count = 0

    def record(self, row: tuple[Any, ...]) -> None:
        """Append one iteration's row; write the batch when it is full."""
        rows = self.rows
        rows.append(row)
        if len(rows) >= self._batch:
            self.flush()

    def flush(self) -> None:
        """Write the rows held as one row group (the first one opens the file)."""
        from servecal.sched.result import batch_columns
        from servecal.util.arrow_numpy import arrow_table

        rows = self.rows
        columns = batch_columns(rows, self._predictor)
        table = arrow_table(columns)
        if self._writer is None:
            import pyarrow.parquet as pq

            self._writer = pq.ParquetWriter(self.path, table.schema)
        if rows:
            self._writer.write_table(table)
        self.count += len(rows)
        rows.clear()

    def finish(self) -> StreamedColumns:
        """Write what is left and close the file: the run's iteration columns."""
        self.flush()
        self._writer.close()
        self._writer = None
        return StreamedColumns(self.path)

    def abort(self) -> None:
        """The run failed: close and remove the unfinished file."""
        if self._writer is not None:
            try:
                self._writer.close()
            finally:
                self._writer = None
        _unlink(str(self.path))


def temporary_file(folder: str | os.PathLike[str] | None) -> Path:
    """A new hidden temporary file for a stream in ``folder`` (``None``: the system's
    temporary folder), with the mode servecal gives the files it writes."""
    from servecal.util.atomic import file_mode

    if folder is not None:
        os.makedirs(folder, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=".iterations.", suffix=".tmp", dir=folder)
    os.close(handle)
    os.chmod(name, file_mode())
    return Path(name)


class StreamedColumns(Mapping[str, np.ndarray]):
    """A streamed run's iteration columns, read from its Parquet file one column at a
    time on use (what the metrics read: a few columns, never the whole frame).

    The file is the run's until :meth:`move_to` puts it in a run folder; a file never
    moved is removed when this mapping goes."""

    def __init__(self, path: Path) -> None:
        import pyarrow.parquet as pq

        self.path = path
        self._names = tuple(pq.ParquetFile(path).schema_arrow.names)
        self._remove = weakref.finalize(self, _unlink, str(path))

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._names:
            raise KeyError(name)
        import pyarrow.parquet as pq

        from servecal.util.arrow_numpy import to_numpy

        return to_numpy(pq.ParquetFile(self.path).read(columns=[name]).column(0))

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def move_to(self, target: str | os.PathLike[str]) -> None:
        """Move the file to ``target`` (a run folder's ``iterations.parquet``)."""
        shutil.move(self.path, target)
        self._remove.detach()
        self.path = Path(target)
