"""``--prefix-cache off`` is the engine as it was: one run at revision REV (default: the
merge base with ``main``) and on this tree, the same spec and seed, every request and
iteration column compared exactly.

Run: ``python benchmarks/prefix_cache_off.py [--rev REV] [--requests 300]``. The
workload is the shipped Azure head (``sched/data/azure_conv_head4000.csv``, no prefix
identity) and the ``chat`` workload; this tree runs them with ``prefix_cache="off"``
and with the default ``auto`` (no identity: no cache).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from importlib import import_module
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from revision import package_at  # noqa: E402


def _run(package: str, workload: str, rate: float, n: int, **extra: object) -> object:
    ex = import_module(f"{package}.sched.experiment")
    registry = import_module(f"{package}.sched.policies.registry")
    spec = ex.RunSpec(workload=workload, policy=registry.PolicySpec.parse("sloweave"),
                      tpot_slo_ms=50.0, rate=rate, n_requests=n, **extra)  # fmt: skip
    return ex.run(spec, 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", default=None)
    ap.add_argument("--requests", type=int, default=300)
    args = ap.parse_args()
    rev = args.rev or subprocess.run(
        ["git", "merge-base", "HEAD", "main"], cwd=ROOT, check=True, capture_output=True,
        text=True,
    ).stdout.strip()  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        old = package_at(rev, Path(tmp))
        azure = f"trace:{ROOT / 'sched/data/azure_conv_head4000.csv'}"
        for workload, rate in ((azure, 20.0), ("chat", 60.0)):
            before = _run(old, workload, rate, args.requests)
            for mode in ("off", "auto"):
                now = _run("servecal", workload, rate, args.requests, prefix_cache=mode)
                same = before.request_columns.keys() == now.request_columns.keys() and all(
                    np.array_equal(before.request_columns[k], now.request_columns[k])
                    for k in before.request_columns
                )
                same_it = all(
                    np.array_equal(
                        np.asarray(before.iteration_columns[k]),
                        np.asarray(now.iteration_columns[k]),
                        equal_nan=True,
                    )
                    for k in before.iteration_columns
                    if k != "decision_us"  # wall-clock time of each decision
                )
                print(f"{Path(workload).name} prefix_cache={mode} vs {rev[:7]}: "
                      f"requests identical {same}, iterations identical {same_it} "
                      f"({len(now.iteration_columns['duration_ms'])} iterations)")  # fmt: skip


if __name__ == "__main__":
    main()
