"""A Parquet table stored as one file or as a folder of append-only parts.

A live server's run log (``integrations/vllm/runlog.py``) appends one part per flush
to ``iterations.parquet/`` and ``requests.parquet/``; simulated runs write one file
each. Readers take either through :func:`read_table`. Parts are read in name order;
hidden names (a writer's ``.part-....tmp``, not yet renamed into place) are skipped,
so a folder being appended to reads as the parts written so far — and, after them,
the rows of its tail (:mod:`servecal.costmodels.segment_tail`: what the writer had
logged but not yet put in a part, kept in the kernel by one ``write()`` per row).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servecal.util.errors import InputError


def table_exists(path: Path) -> bool:
    """``path`` is a Parquet file or a folder of parts."""
    return path.is_file() or path.is_dir()


def parts(path: Path) -> list[Path]:
    """The parts of a segmented table, in order (a plain file is its one part)."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.glob("*.parquet") if not p.name.startswith((".", "_")))


def read_table(path: Path, columns: Any = None) -> Any:
    """The table at ``path`` as a pandas frame: its parts, then its tail's rows no
    part holds; unreadable input is one :class:`InputError` line (a folder with
    nothing logged yet: "no part written yet")."""
    import pandas as pd

    found = parts(path)
    try:
        frames = [pd.read_parquet(p) for p in found]
    except Exception as exc:  # pyarrow raises several types for one cause: unreadable
        raise InputError(f"{path}: not a readable Parquet file ({type(exc).__name__})") from None
    if path.is_dir():
        frames = _with_tail(path, frames)
    if not frames:
        raise InputError(f"{path}: no part written yet (a run log that has not flushed)")
    frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    if columns is None:
        return frame
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(f"{path}: column '{missing[0]}': missing")
    return frame[list(columns)]


def _with_tail(path: Path, frames: list[Any]) -> list[Any]:
    """``frames`` (the parts) and the tail's rows they do not hold, in the parts'
    dtypes (a column the tail lacks, such as a prediction made at the flush, is
    NaN there)."""
    from servecal.costmodels.segment_tail import read_tail, tail_files

    if not tail_files(path):
        return frames
    held: set[Any] = set()
    for frame in frames:
        for key in ("step", "request_id"):
            if key in frame.columns:
                held.update(frame[key].tolist())
    try:
        tail = read_tail(path, held)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: its tail is not readable ({type(exc).__name__})") from None
    if tail is None:
        return frames
    if frames:
        like = frames[0]
        tail = tail.reindex(columns=like.columns)
        for name in like.columns:
            if tail[name].notna().all() and tail[name].dtype != like[name].dtype:
                tail[name] = tail[name].astype(like[name].dtype)
    return [*frames, tail]
