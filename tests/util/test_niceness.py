"""``--nice``: the engine's process (and what it starts) runs at the niceness asked for;
one that may not be set is one line, the child gone; bench refuses it without a server
of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.util.errors import InputError
from servecal.util.niceness import autogroup_niceness, check_niceness, popen_at_niceness

# prints its own niceness, then a grandchild's (started after the renice)
REPORT = (
    "import os, subprocess, sys; print(os.getpriority(os.PRIO_PROCESS, 0)); "
    "subprocess.run([sys.executable, '-c', 'import os; print(os.getpriority(os.PRIO_PROCESS, 0))'])"
)


def test_the_child_and_what_it_starts_run_at_the_niceness() -> None:
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    wanted = min(19, mine + 7)  # raising one's niceness needs no privilege
    proc = popen_at_niceness([sys.executable, "-c", REPORT], wanted, stdout=subprocess.PIPE)
    group = autogroup_niceness(proc.pid)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert [int(x) for x in out.split()] == [wanted, wanted]
    # its own session, whose group (where the kernel groups by session) ranks the same
    assert group in (None, wanted)
    if autogroup_niceness(os.getpid()) is not None:
        assert group == wanted


def test_no_niceness_leaves_the_childs_as_ours() -> None:
    proc = popen_at_niceness([sys.executable, "-c", REPORT], None, stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=60)
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    assert [int(x) for x in out.split()] == [mine, mine]


def test_a_niceness_that_may_not_be_set_is_one_line_and_the_child_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    def recording_popen(*args: object, **kwargs: object) -> subprocess.Popen:
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    def refused(*args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    monkeypatch.setattr(os, "setpriority", refused)
    with pytest.raises(InputError, match=r"--nice -20: cannot set .* needs root or CAP_SYS_NICE"):
        popen_at_niceness([sys.executable, "-c", "import time; time.sleep(60)"], -20)
    (child,) = started
    assert child.poll() is not None  # killed and reaped, not left running


@pytest.mark.parametrize("nice", [-21, 20, 1000])
def test_a_niceness_outside_linuxs_range_is_refused(nice: int) -> None:
    with pytest.raises(InputError, match="expected -20..19"):
        check_niceness(nice)


def test_bench_refuses_nice_for_a_server_it_does_not_start(tmp_path: Path) -> None:
    args = ["bench", "--out", str(tmp_path / "b"), "--url", "http://127.0.0.1:1", "--rate", "1",
            "--tpot-slo", "50", "--nice", "-5"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        "error: --nice sets the niceness of a server bench starts: not with --url"
    ]
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize(("text", "group"), [("/autogroup-209 nice -5\n", -5), ("", None)])
def test_a_session_groups_niceness_is_read_and_an_empty_file_is_no_group(
    monkeypatch: pytest.MonkeyPatch, text: str, group: int | None
) -> None:
    # CI's sandbox shows /proc/PID/autogroup but leaves it empty
    monkeypatch.setattr(Path, "read_text", lambda self: text)
    assert autogroup_niceness(os.getpid()) == group
