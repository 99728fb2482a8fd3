"""Start a child process at a chosen niceness (``--nice`` of ``calibrate --engine vllm``
and ``bench``).

On a shared CPU host a neighbour's load moves an engine step 2-4x between a
calibration and a later served run, so a table can look drifted when nothing about
the engine changed. Running the engine at a high priority in both (``--nice -20``)
gives it its core whatever else runs, so the two time the same thing.

Two settings make that true on Linux. The process's own niceness, set from the
parent right after ``exec`` (not in a ``preexec_fn``, unsafe beside the progress
bar's thread): a fresh Python creates no thread or process before it imports, and a
thread's niceness is inherited by every thread and process it creates later. And,
where the kernel groups processes by session (``/proc/sys/kernel/sched_autogroup_enabled``,
on by default in most distributions), a niceness only ranks processes *within* a
session while sessions share the CPU equally: so the child gets a session of its own
and that session's group gets the same niceness (``/proc/PID/autogroup``)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

from servecal.util.errors import InputError

LOWEST, HIGHEST = -20, 19  # the niceness range Linux accepts


def check_niceness(nice: int | None) -> None:
    """Refuse a niceness outside Linux's range (before anything starts)."""
    if nice is not None and not LOWEST <= nice <= HIGHEST:
        raise InputError(f"--nice {nice}: expected {LOWEST}..{HIGHEST}")


def popen_at_niceness(cmd: list[str], nice: int | None, **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(cmd, **kwargs)``, its process at niceness ``nice`` (``None``:
    this process's, and its session). With a niceness the child leads a session of its
    own (a signal to this process's group no longer reaches it: the caller forwards
    one). A niceness this process may not set is one line, the child gone."""
    check_niceness(nice)
    if nice is None:
        return subprocess.Popen(cmd, **kwargs)
    proc = subprocess.Popen(cmd, **{**kwargs, "start_new_session": True})
    try:
        os.setpriority(os.PRIO_PROCESS, proc.pid, nice)
        group = Path(f"/proc/{proc.pid}/autogroup")
        if group.exists():
            group.write_text(str(nice))
    except OSError as exc:
        proc.kill()
        proc.wait()
        raise InputError(
            f"--nice {nice}: cannot set the engine's niceness ({exc.strerror}; a niceness "
            f"below {os.getpriority(os.PRIO_PROCESS, 0)} needs root or CAP_SYS_NICE)"
        ) from None
    return proc


def autogroup_niceness(pid: int) -> int | None:
    """The niceness of ``pid``'s session group (``None`` where the kernel has none)."""
    try:
        text = Path(f"/proc/{pid}/autogroup").read_text()  # "/autogroup-209 nice 0"
    except OSError:
        return None
    # some sandboxes (CI's among them) show the file but leave it empty: no group then
    found = re.search(r"\bnice\s+(-?\d+)", text)
    return int(found.group(1)) if found else None
