"""A Parquet table stored as one file or as a folder of append-only parts.

A live server's run log (``integrations/vllm/runlog.py``) appends one part per flush
to ``iterations.parquet/`` and ``requests.parquet/``; simulated runs write one file
each. Readers take either through :func:`read_table`. Parts are read in name order;
hidden names (a writer's ``.part-....tmp``, not yet renamed into place) are skipped,
so a folder being appended to reads as the parts written so far.
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
    """The table at ``path`` as a pandas frame; unreadable input is one
    :class:`InputError` line (a folder with no part yet: "nothing logged yet")."""
    import pandas as pd

    found = parts(path)
    if not found:
        raise InputError(f"{path}: no part written yet (a run log that has not flushed)")
    try:
        frames = [pd.read_parquet(p, columns=columns) for p in found]
    except Exception as exc:  # pyarrow raises several types for one cause: unreadable
        raise InputError(f"{path}: not a readable Parquet file ({type(exc).__name__})") from None
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
