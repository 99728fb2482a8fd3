"""The ``servecal`` console entry point: the process's BLAS threads, then the command line.

numpy's OpenBLAS starts a thread per core when numpy is imported, and an idle thread
spins for a while waiting for work before it sleeps: ~0.07 CPU s a process on a
2-core host, an eighth of a 2,000-request ``simulate``
(docs/results/2026-12-04-vidur-side-by-side.md). servecal's numpy work is on small
arrays, which one BLAS thread runs as fast, so the command line runs numpy's (and
scipy's) BLAS on one thread — unless the user set ``OPENBLAS_NUM_THREADS``, and except
in the commands that time a device or start engines: those processes inherit the
environment, and a calibration must time what the user's engine runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping, Sequence

#: Commands that keep OpenBLAS's own thread count: they time a device or start engines.
DEVICE_COMMANDS = frozenset({"bench", "calibrate", "demo", "fleet"})


def limit_blas_threads(args: Sequence[str], environ: MutableMapping[str, str]) -> None:
    """One BLAS thread for the command ``args`` name, unless the user chose a count or
    the command is one of :data:`DEVICE_COMMANDS`. Must run before numpy is imported."""
    if args and args[0] in DEVICE_COMMANDS:
        return
    environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main() -> None:
    """Console entry point (``servecal`` and ``python -m servecal``)."""
    limit_blas_threads(sys.argv[1:], os.environ)
    from servecal.cli import main as command_line

    command_line()
