"""One writer per output folder: a lock file holding the writer's pid.

``servecal`` commands that write a folder (runs, a calibration, a report) hold
:func:`folder_lock` on it while they write. A second writer finds it held and
stops with one line naming the holder's pid (:class:`FolderBusy`, an
``InputError``: exit 2). The lock is an advisory ``flock`` on
``FOLDER/.servecal.lock``, so a writer that died (killed, crashed, power lost
on a local disk) leaves a stale file whose lock the kernel has already
released: the next writer takes it over and writes its own pid there. (``flock``
is per host: two machines writing one NFS folder are not kept apart.)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from servecal.util.atomic import file_mode, folder_mode
from servecal.util.errors import InputError

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX: no locking
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".servecal.lock"


class FolderBusy(InputError):
    """Another live process is writing this folder."""


def _holder(lock: Path) -> str:
    try:
        text = lock.read_text().strip()
    except OSError:
        return "unknown pid"
    return f"pid {text}" if text.isdigit() else "unknown pid"


def make_folder(folder: Path) -> list[Path]:
    """Create ``folder`` (and its parents) with a normal folder's mode; returns the
    folders it created, outermost first."""
    missing = []
    p = Path(folder)
    while not p.exists() and p.parent != p:
        missing.append(p)
        p = p.parent
    created = []
    for q in reversed(missing):
        q.mkdir(exist_ok=True)
        os.chmod(q, folder_mode())
        created.append(q)
    return created


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike[str], command: str = "servecal") -> Iterator[Path]:
    """Hold ``folder``'s lock (creating the folder) for the ``with`` block; folders it
    created and that are still empty at the end are removed again."""
    root = Path(folder)
    if root.exists() and not root.is_dir():
        raise InputError(f"{root}: exists and is not a folder")
    created = make_folder(root)
    lock = root / LOCK_NAME
    if fcntl is None:  # pragma: no cover
        yield lock
        return
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, file_mode())
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise FolderBusy(
                f"{root}: another {command} is writing this folder ({_holder(lock)}, "
                f"lock {lock}); wait for it to finish or choose another --out"
            ) from None
        # the holder before us may have removed the file as we opened it: lock the live one
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield lock
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()  # before unlocking: a waiter then retries on a fresh file
        os.close(fd)
        for folder in reversed(created):  # a command that wrote nothing leaves nothing
            with contextlib.suppress(OSError):
                folder.rmdir()
