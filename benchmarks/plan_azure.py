"""Time ``servecal plan`` on the Azure conversation trace, locally and on Ray.

    python benchmarks/plan_azure.py [--plan examples/capacity/azure_imported.toml]
        [--jobs 2] [--ray] [--out runs/plan-bench]

The default plan is the one on the A100 and H100 tables imported from aiconfigurator
(docs/capacity.md); ``--plan examples/capacity/azure_a100_h100.toml`` times the fleet
devices' (paper-scale) one.

Runs the whole command in a fresh process (startup included) with ``--jobs`` worker
processes, prints its wall time and the CPU time of it and its workers, the answer, and
how many simulations the answer and the frontier took; ``--ray`` runs the same plan
with ``--pool ray`` (a local Ray of ``--jobs`` CPUs) and says whether the answer and
every configuration's replica count are the same. The issue's bar: under 5 minutes on
2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "examples" / "capacity" / "azure_imported.toml"


def timed(args: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", type=Path, default=PLAN)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--ray", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("runs/plan-bench"))
    args = parser.parse_args()
    base = [sys.executable, "-m", "servecal", "plan", str(args.plan), "--jobs", str(args.jobs)]
    runs = {"local": [], "ray": ["--pool", "ray"]} if args.ray else {"local": []}
    docs = {}
    for name, extra in runs.items():
        out = args.out / name
        wall, cpu = timed([*base, "--out", str(out), *extra])
        doc = json.loads((out / "plan.json").read_text())
        docs[name] = doc
        a = doc["answer"]
        print(f"{name}: {wall:.1f} s wall, {cpu:.1f} s CPU (command and workers), "
              f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")  # fmt: skip
        print(f"  cheapest: {a['replicas']} × {a['config']}: ${a['cost_per_hour']:.2f}/hour, "
              f"{100 * a['attainment']:.1f}% good")  # fmt: skip
        print(
            f"  {doc['simulations_to_answer']} simulations to the answer, "
            f"{doc['simulations']} with the frontier ({len(doc['frontier'])} on it)"
        )
    if args.ray:
        same = [(r["config"], r["replicas"]) for r in docs["local"]["rows"]] == [
            (r["config"], r["replicas"]) for r in docs["ray"]["rows"]
        ]
        answer = docs["local"]["answer"]["config"] == docs["ray"]["answer"]["config"]
        print(f"ray vs local: same answer {answer}, same replica counts for every config {same}")


if __name__ == "__main__":
    main()
