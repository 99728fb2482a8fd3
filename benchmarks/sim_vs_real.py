"""A simulated run against the real CPU vLLM engine's same run.

1. ``servecal calibrate --engine vllm`` on the ``tiny`` dummy model (``--grid``);
2. ``servecal bench --policy vllm`` on the same engine (vLLM's own scheduler, the
   plug-in logging its steps) with a servecal workload;
3. ``servecal validate`` of the table against the server's run folder;
4. ``servecal simulate --workload trace:BENCH/run`` (the same arrivals and lengths)
   with ``--policy budget-N`` (vLLM's token budget, N = ``--max-num-batched-tokens``),
   ``--truth samples:`` of the calibration and ``--predictor`` its table;
5. prints the measured and simulated TTFT/TPOT P50/P95/P99 and SLO attainment, and
   the errors, as Markdown tables: against the client's run (what a user saw) and
   against the plug-in's run folder (the scheduler's token times, what the
   simulator models).

Needs the CPU engine's Python (``SERVECAL_VLLM_CPU_PYTHON=$(bash scripts/vllm_cpu_env.sh)``)::

    python benchmarks/sim_vs_real.py --out /tmp/svr [--grid grid.json] [--requests 40]
        [--rate 2] [--workload chat] [--repeats 6] [--cal DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from servecal.sched.experiment.versus import run_quantiles, table

GRID = {"n_decode": [0, 1, 2, 4, 6, 8], "chunk": [0, 64, 256], "ctx": [16, 512, 1536],
        "prefix": [0, 768]}  # fmt: skip


def servecal(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "servecal", *args]
    print("$ servecal " + " ".join(args), file=sys.stderr, flush=True)
    return subprocess.run(cmd, capture_output=True, text=True)


def checked(*args: str) -> str:
    done = servecal(*args)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    return done.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cal", type=Path, help="an existing --engine vllm calibration")
    ap.add_argument("--grid", type=Path)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--workload", default="chat")
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--rate", type=float, default=2.0)
    ap.add_argument("--tpot-slo", type=float, default=50.0)
    ap.add_argument("--max-num-batched-tokens", type=int, default=256)
    args = ap.parse_args()
    python = os.environ.get("SERVECAL_VLLM_CPU_PYTHON")
    if not python:
        sys.exit("set SERVECAL_VLLM_CPU_PYTHON=$(bash scripts/vllm_cpu_env.sh)")
    args.out.mkdir(parents=True, exist_ok=True)
    cal = args.cal
    if cal is None:
        grid = args.grid or args.out / "grid.json"
        if args.grid is None:
            grid.write_text(json.dumps(GRID))
        cal = args.out / "cal"
        checked("calibrate", "--engine", "vllm", "--device", "cpu", "--server-python", python,
                "--grid", str(grid), "--repeats", str(args.repeats), "--out", str(cal))  # fmt: skip
    bench = args.out / "bench"
    common = ["--tpot-slo", str(args.tpot_slo)]
    checked("bench", "--out", str(bench), "--model-dir", str(cal / "model"),
            "--table", str(cal / "costtable.json"), "--policy", "vllm", "--server-python",
            python, "--workload", args.workload, "--requests", str(args.requests),
            "--rate", str(args.rate), "--max-num-batched-tokens",
            str(args.max_num_batched_tokens), *common)  # fmt: skip
    verdict = servecal("validate", str(cal / "costtable.json"), str(bench / "server-log"))
    sim = args.out / "sim"
    checked("simulate", "--workload", f"trace:{bench / 'run'}", "--policy",
            f"budget-{args.max_num_batched_tokens}",
            "--truth", f"samples:{cal / 'samples.parquet'}",
            "--predictor", str(cal / "costtable.json"), "--seeds", "1",
            "--requests", str(args.requests), "--out", str(sim), "--force", *common)  # fmt: skip
    (sim_run,) = [p for p in sim.iterdir() if (p / "requests.parquet").exists()]
    print(f"validate (exit {verdict.returncode}): {verdict.stdout.strip().splitlines()[0]}")
    simulated = run_quantiles(sim_run)
    print("\nagainst the client's run (token times as the client read them):\n")
    print(table(run_quantiles(bench / "run"), simulated))
    print("\nagainst the server's run folder (token times = ends of the steps, as simulated):\n")
    print(table(run_quantiles(bench / "server-log"), simulated))


if __name__ == "__main__":
    main()
