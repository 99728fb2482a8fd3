"""Write files atomically: to a temporary name beside the target, then ``os.replace``.

A crash or a bad input never leaves a half-written output behind. What servecal
writes gets ordinary modes: files 0644, folders 0755 (less what the umask
removes), not the 0600/0700 of ``mkstemp``/``mkdtemp``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

#: Modes of what servecal writes, before the umask.
FILE_MODE = 0o644
FOLDER_MODE = 0o755


@lru_cache(maxsize=1)
def _umask() -> int:
    mask = os.umask(0)  # the only way to read it; read once (it is process-wide)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """Mode for a file servecal writes: :data:`FILE_MODE` less the umask."""
    return FILE_MODE & ~_umask()


def folder_mode() -> int:
    """Mode for a folder servecal writes: :data:`FOLDER_MODE` less the umask."""
    return FOLDER_MODE & ~_umask()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, file_mode())  # mkstemp makes 0600
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def temporary_folder(parent: Path, name: str) -> Path:
    """A new hidden ``.NAME.*.tmp`` folder in ``parent`` with a normal folder's mode
    (renamed into place by the caller; never counted as a run while it has that name)."""
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f".{name}.", suffix=".tmp"))
    os.chmod(tmp, folder_mode())  # mkdtemp makes 0700
    return tmp
