"""The console entry point runs numpy's BLAS on one thread, except where it must not."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from servecal.launch import DEVICE_COMMANDS, limit_blas_threads


@pytest.mark.parametrize("args", [["simulate", "--requests", "10"], ["fit", "x"], [], ["--help"]])
def test_light_commands_get_one_blas_thread(args: list[str]) -> None:
    environ: dict[str, str] = {}
    limit_blas_threads(args, environ)
    assert environ == {"OPENBLAS_NUM_THREADS": "1"}


@pytest.mark.parametrize("command", sorted(DEVICE_COMMANDS))
def test_device_commands_keep_the_default(command: str) -> None:
    environ: dict[str, str] = {}
    limit_blas_threads([command, "--device", "cpu"], environ)
    assert environ == {}


def test_the_users_setting_wins() -> None:
    environ = {"OPENBLAS_NUM_THREADS": "4"}
    limit_blas_threads(["simulate"], environ)
    assert environ == {"OPENBLAS_NUM_THREADS": "4"}


def test_module_entry_sets_it_before_numpy_loads() -> None:
    # ``python -m servecal`` goes through the launcher; numpy must not be loaded first,
    # or the setting would come too late to matter
    code = (
        "import os, sys, runpy\n"
        "os.environ.pop('OPENBLAS_NUM_THREADS', None)\n"
        "sys.argv = ['servecal', '--version']\n"
        "try:\n    runpy.run_module('servecal', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "1"
    first = subprocess.run(
        [sys.executable, "-c", "import sys, servecal.launch; print('numpy' in sys.modules)"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert first.stdout.strip() == "False"
