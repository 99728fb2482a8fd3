"""A whole ``servecal simulate`` imports nothing it does not use: every process pays
an import (docs/results/2026-12-04-stream-rows.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer

from servecal.sched.fitted_table import SHIPPED_PATH

#: Libraries the simulate path never uses (pandas: only for frames a user asks for;
#: multiprocessing: only for a pool of more than one job).
UNUSED = ("pandas", "scipy", "numba", "sklearn", "lightgbm", "torch", "matplotlib", "rich",
          "multiprocessing")  # fmt: skip
#: Nor, for a ``budget-512`` run, the policies and drivers it does not run, nor
#: ``numpy.ma`` (numpy's percentile and median import it; the metrics' own do not).
NOT_RUN = ("servecal.sched.policies.sloweave", "servecal.sched.flowprefill.driver",
           "servecal.sched.flowprefill.operators", "numpy.ma")  # fmt: skip


def _typer_needs_pydantic() -> bool:
    """typer 0.29 coerces every option through pydantic (pyproject pins < 0.29)."""
    major, minor = (int(x) for x in typer.__version__.split(".")[:2])
    return (major, minor) >= (0, 29)


@pytest.mark.parametrize("extra", [[], ["--stream-iterations"]])
def test_simulate_imports_no_library_it_does_not_use(tmp_path: Path, extra: list[str]) -> None:
    # a cost table file (the default ``fitted`` predictor re-derives its margin from
    # probe frames in every process: pandas, a cost of its own)
    args = ["simulate", "--workload", "chat", "--requests", "30", "--seeds", "1",
            "--policy", "budget-512", "--tpot-slo", "100", "--predictor", str(SHIPPED_PATH),
            "--out", str(tmp_path / "run"), "--json", *extra]  # fmt: skip
    unused = UNUSED if _typer_needs_pydantic() else (*UNUSED, "pydantic")
    unused = (*unused, *NOT_RUN)
    code = (
        "import sys\n"
        "from servecal.cli import main\n"
        f"sys.argv = ['servecal', *{args!r}]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        f"print(','.join(m for m in {unused!r} if m in sys.modules) or 'clean')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "clean"
    assert (tmp_path / "run" / "seed-0" / "iterations.parquet").is_file()
