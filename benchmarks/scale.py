"""Cost as the work grows: one ``servecal simulate`` command per size, its wall and CPU
time, iterations per second and peak memory.

Run: ``python benchmarks/scale.py [--sizes 2000,20000,200000,1000000] [--workload mixed]
[--table sched/data/device_a100_fitted.json] [--stream]``; ``--stream`` runs each size with
``--stream-iterations`` (iteration rows written to the run folder in batches, not kept).

Each size is one fresh process (startup included) running ``servecal simulate
--workload W --requests N --seeds 1 --policy sloweave-p50 --predictor table:TABLE
--tpot-slo 100 --out RUN --json`` in a scratch folder; its peak memory is the
process's own maximum resident set (``os.wait4``'s ``ru_maxrss``), its iterations
those the JSON reports. The figures that say whether the cost grows as it should:
CPU microseconds per iteration (flat: time linear in iterations) and memory per
request above the smallest run's (bounded by what the run keeps per request and per
iteration). The host's load average is printed: on a shared host wall time stretches,
CPU time much less.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_once(command: list[str], cwd: Path) -> dict:
    """Wall s, CPU s, peak RSS (MB) and the JSON of one fresh process."""
    t0 = time.perf_counter()
    with open(cwd / "out.txt", "wb") as out, open(cwd / "err.txt", "wb") as err:
        pid = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=err).pid
        _, status, usage = os.wait4(pid, 0)  # this child's own rusage (not all children's)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        tail = (cwd / "err.txt").read_text()[-400:]
        raise SystemExit(f"error: {' '.join(command)}: {tail.strip()}")
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_mb": usage.ru_maxrss / 1024,
        "result": json.loads((cwd / "out.txt").read_text()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2000,20000,200000,1000000")
    parser.add_argument("--workload", default="mixed")
    parser.add_argument("--table", default=str(ROOT / "sched/data/device_a100_fitted.json"))
    parser.add_argument("--extra", default="", help="more simulate options, space-separated")
    parser.add_argument("--stream", action="store_true", help="add --stream-iterations")
    args = parser.parse_args()
    if args.stream:
        args.extra = f"{args.extra} --stream-iterations".strip()
    sizes = [int(s) for s in args.sizes.split(",")]
    table = str(Path(args.table).resolve())
    print(f"servecal simulate --workload {args.workload} --predictor table:{Path(table).name} "
          f"--policy sloweave-p50 --tpot-slo 100 --seeds 1 {args.extra}".rstrip())  # fmt: skip
    print(f"{'requests':>9} {'iterations':>11} {'wall s':>8} {'CPU s':>8} {'it/s CPU':>9} "
          f"{'µs/it CPU':>9} {'peak MB':>8} {'KB/req':>7} {'load':>5}")  # fmt: skip
    base = None
    with tempfile.TemporaryDirectory(prefix="servecal-scale-") as tmp:
        work = Path(tmp)
        for n in sizes:
            shutil.rmtree(work / "run", ignore_errors=True)
            command = [sys.executable, "-m", "servecal", "simulate", "--workload", args.workload,
                       "--requests", str(n), "--seeds", "1", "--policy", "sloweave-p50",
                       "--predictor", f"table:{table}", "--tpot-slo", "100",
                       "--out", str(work / "run"), "--json", *args.extra.split()]  # fmt: skip
            r = run_once(command, work)
            its = int(float(r["result"]["iterations"]))
            base = base or r
            per_req = (r["peak_mb"] - base["peak_mb"]) * 1024 / n if r is not base else 0.0
            print(f"{n:>9,} {its:>11,} {r['wall_s']:8.1f} {r['cpu_s']:8.1f} "
                  f"{its / r['cpu_s']:9,.0f} {r['cpu_s'] / its * 1e6:9.1f} {r['peak_mb']:8.0f} "
                  f"{per_req:7.2f} {os.getloadavg()[0]:5.1f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
