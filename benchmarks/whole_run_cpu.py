"""The whole 2,000-request ``servecal simulate`` of the Vidur side by side, as CPU seconds
of fresh processes, this tree against other code or another installed library.

Run: ``python benchmarks/whole_run_cpu.py [TRACE PROFILE] [--rounds 7] [--baseline REV]
[--site DIR ...] [--policy budget-512]``.

``servecal import aiconfigurator PROFILE --model llama-3-8b`` and ``servecal fit`` once
(untimed), then the side by side's command (docs/results/2026-12-04-vidur-side-by-side.md)
``servecal simulate --workload trace:TRACE --requests 2000 --seeds 1 --policy POLICY
--truth samples:... --predictor TABLE --tpot-slo 100 --out run --json`` in fresh
processes (interpreter, imports, loading, the run, the run folder), the variants
interleaved round robin so a busy host's slow seconds fall on all of them alike: this
tree; with ``--baseline REV`` revision ``REV``'s code (``PYTHONPATH``); with each
``--site DIR`` this tree and ``REV``'s with ``DIR`` first on ``PYTHONPATH`` (e.g. a
folder holding another typer version: ``pip install --no-deps --target DIR
typer==0.29.2``). ``.pyc`` files are written (an installed package has them). Printed:
each variant's median and smallest CPU seconds, median wall seconds, its iterations,
and its CPU (median, smallest) as a ratio to this tree's: CPU time on a busy host
still moves with its clock speed and caches, and the smallest is the least disturbed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import _cached_bytecode_env, _timed, _tree_at  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "sched" / "data" / "azure_conv_head4000.csv"
PROFILE = ROOT / "sched" / "data" / "aiconfigurator_a100_sxm_vllm0.14"


def _variants(args: argparse.Namespace, work: Path) -> dict[str, dict[str, str]]:
    """Label → environment of each variant timed."""
    env = _cached_bytecode_env()
    env.pop("PYTHONPATH", None)
    trees = {"this tree": None}
    if args.baseline:
        (work / "rev").mkdir()
        trees[args.baseline] = str(_tree_at(args.baseline, work / "rev"))
    out = {}
    for site in [None, *args.site]:
        for label, tree in trees.items():
            paths = [p for p in (tree, site) if p]
            name = label + (f" + {Path(site).name}" if site else "")
            out[name] = {**env, "PYTHONPATH": os.pathsep.join(paths)} if paths else env
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", nargs="?", default=str(TRACE))
    parser.add_argument("profile", nargs="?", default=str(PROFILE))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--baseline", metavar="REV")
    parser.add_argument("--site", action="append", default=[], metavar="DIR")
    parser.add_argument("--policy", default="budget-512")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="servecal-whole-run-") as tmp:
        work = Path(tmp)
        exe = [sys.executable, "-m", "servecal"]
        samples, table = work / "a100.parquet", work / "a100.json"
        subprocess.run([*exe, "import", "aiconfigurator", str(Path(args.profile).resolve()),
                        "--model", "llama-3-8b", "--out", str(samples)],
                       check=True, capture_output=True, cwd=work)  # fmt: skip
        subprocess.run([*exe, "fit", str(samples), "--out", str(table)], check=True,
                       capture_output=True, cwd=work)  # fmt: skip
        command = [*exe, "simulate", "--workload", f"trace:{Path(args.trace).resolve()}",
                   "--requests", "2000", "--seeds", "1", "--policy", args.policy,
                   "--truth", f"samples:{samples}", "--predictor", str(table),
                   "--tpot-slo", "100", "--out", "run", "--json"]  # fmt: skip
        variants = _variants(args, work)
        times: dict[str, list[tuple[float, float]]] = {label: [] for label in variants}
        iterations: dict[str, int] = {}
        for r in range(args.rounds + 1):
            order = list(variants.items())
            for label, env in order if r % 2 else reversed(order):
                subprocess.run(["rm", "-rf", str(work / "run")], check=True)
                wall, cpu, out = _timed(command, env, cwd=work)
                iterations[label] = int(float(json.loads(out)["iterations"]))
                if r:  # round 0 writes the bytecode caches
                    times[label].append((wall, cpu))
    print(" ".join(command[2:]).replace(str(work) + "/", ""))
    print(f"fresh processes, median of {args.rounds} interleaved rounds; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (shared host)")  # fmt: skip
    mine = [c for _, c in times["this tree"]]
    print(f"{'variant':<34} {'iterations':>10} {'wall s':>7} {'CPU s median':>13} "
          f"{'smallest':>9} {'CPU / this tree':>16}")  # fmt: skip
    for label, samples in times.items():
        wall = statistics.median(w for w, _ in samples)
        cpus = [c for _, c in samples]
        med, low = statistics.median(cpus), min(cpus)
        print(f"{label:<34} {iterations[label]:>10,} {wall:7.2f} {med:13.3f} {low:9.3f} "
              f"{med / statistics.median(mine):8.2f}x, {low / min(mine):.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
