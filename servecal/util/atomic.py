"""Write files atomically: to a temporary name beside the target, then ``os.replace``.

A crash or a bad input never leaves a half-written output behind. A target that
is not a regular file is never replaced by the rename: a symbolic link keeps
pointing where it did (the file it names is replaced), and a device or FIFO
(``/dev/null``, ``/dev/stdout`` of a pipe) is written in place once the output is
complete; a folder is refused. What servecal writes gets ordinary modes: files
0644, folders 0755 (less what the umask removes), not the 0600/0700 of
``mkstemp``/``mkdtemp``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
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


def is_special(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` exists (a link followed) and is not a regular file or a folder:
    a device, a FIFO, a socket, which is written in place, never replaced."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _resolved_target(path: str | os.PathLike[str]) -> Path:
    """Where the rename must land: ``path``, or the file its symbolic link names."""
    target = Path(path)
    if not target.is_symlink():
        if target.is_dir():
            raise IsADirectoryError(errno.EISDIR, "is a folder, expected a file", str(path))
        return target
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(
            errno.ENOENT, "a symbolic link to nothing (servecal will not replace it)", str(path)
        ) from None
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "links to a folder, expected a file", str(path))
    return Path(os.path.realpath(target))


@contextlib.contextmanager
def _in_place(target: Path) -> Iterator[Path]:
    """A temporary file (in the temporary folder); on success copied into ``target``."""
    fd, tmp = tempfile.mkstemp(prefix=".servecal-", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
    finally:
        Path(tmp).unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` (see the
    module docstring for links, devices and FIFOs)."""
    if is_special(path):
        with _in_place(Path(path)) as tmp:
            yield tmp
        return
    target = _resolved_target(path)
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
