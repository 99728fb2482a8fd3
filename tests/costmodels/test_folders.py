"""One writer per output folder: the lock names its holder, a dead holder's lock is taken over."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from servecal.util.atomic import atomic_write_bytes, temporary_folder
from servecal.util.errors import InputError
from servecal.util.folders import LOCK_NAME, FolderBusy, folder_lock, make_folder

HOLD = (
    "import sys, time\n"
    "from servecal.util.folders import folder_lock\n"
    "with folder_lock(sys.argv[1]):\n"
    "    print('held', flush=True)\n"
    "    time.sleep(60)\n"
)


def test_lock_holds_the_writers_pid_and_goes_away(tmp_path: Path) -> None:
    with folder_lock(tmp_path / "out") as lock:
        assert lock == tmp_path / "out" / LOCK_NAME
        assert lock.read_text().strip() == str(os.getpid())
    assert not lock.exists()
    assert not (tmp_path / "out").exists()  # created for nothing: removed again


def test_a_second_writer_is_refused_naming_the_first(tmp_path: Path) -> None:
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderBusy) as exc, folder_lock(out, "servecal simulate"):
            pass
        msg = str(exc.value)
        assert f"pid {holder.pid}" in msg and "another servecal simulate" in msg
        assert "\n" not in msg
    finally:
        holder.kill()
        holder.wait()
    with folder_lock(out) as lock:  # the holder died: its lock went with it
        assert lock.read_text().strip() == str(os.getpid())


def test_a_stale_lock_file_of_a_dead_pid_is_taken_over(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).write_text(f"{dead.pid}\n")  # left by a writer that was killed
    with folder_lock(out) as lock:
        assert lock.read_text().strip() == str(os.getpid())
    assert out.is_dir()  # it existed before: kept


def test_an_existing_file_is_not_a_folder(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="not a folder"), folder_lock(tmp_path / "f"):
        pass


def test_files_are_0644_and_folders_0755(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_bytes(tmp_path / "a" / "f.json", b"{}")
        made = make_folder(tmp_path / "b" / "c")
        tmp = temporary_folder(tmp_path, "run")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a" / "f.json").stat().st_mode) == 0o644
    assert [stat.S_IMODE(p.stat().st_mode) for p in made] == [0o755, 0o755]
    assert stat.S_IMODE(tmp.stat().st_mode) == 0o755
    assert tmp.name.startswith(".run.") and tmp.name.endswith(".tmp")


def test_lock_is_released_when_the_block_raises(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), folder_lock(tmp_path) as lock:
        raise RuntimeError("boom")
    assert not lock.exists()
    with folder_lock(tmp_path) as again:  # the lock never waits: held, it is FolderBusy
        assert again.exists()
