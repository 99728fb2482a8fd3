"""SLOWeave against vLLM's own scheduler on a real CPU vLLM engine, by maximum goodput.

For each token budget (``--max-num-batched-tokens``), TPOT target and repeat, in
interleaved order (the policies alternate which goes first), runs ``servecal bench
--dummy-model tiny --max-goodput`` once with the plug-in planning (``sloweave``) and
once with vLLM's own scheduling, logged by the same plug-in (``vllm``): each search
starts its own server. Prints one line per search as it ends and a table at the end;
every search's folder (probes, server log) stays under ``--out``. Needs the CPU
engine's Python (scripts/vllm_cpu_env.sh) and a cost table for the ``tiny`` shape::

    python benchmarks/vllm_cpu_goodput.py --table cal/costtable.json \\
        --server-python "$(bash scripts/vllm_cpu_env.sh)" --out runs/vllm-cpu-goodput

Each search starts its own server and is judged on the client's view. The grid
against every budget, one server per configuration and the engine's view:
``benchmarks/vllm_cpu_budgets.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", type=Path, required=True)
    ap.add_argument("--server-python", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budgets", default="256,512,2048")
    ap.add_argument("--tpot-slo", default="50,100", help="TPOT targets, ms")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--workload", default="mixed")
    ap.add_argument("--rate-range", default="0.5:4")
    ap.add_argument("--rate-tol", default="0.15")
    args = ap.parse_args()
    if not args.table.is_file():
        print(f"error: --table {args.table}: no such file", file=sys.stderr)
        return 2
    budgets = [int(b) for b in args.budgets.split(",")]
    slos = [float(s) for s in args.tpot_slo.split(",")]
    found: dict[tuple[int, float, str], list[str]] = {}
    for rep in range(args.repeats):
        for budget in budgets:
            for slo in slos:
                order = ("sloweave", "vllm") if rep % 2 == 0 else ("vllm", "sloweave")
                for policy in order:
                    out = args.out / f"b{budget}-slo{slo:g}-{policy}-r{rep}"
                    cmd = [
                        sys.executable, "-m", "servecal", "bench", "--out", str(out),
                        "--dummy-model", "tiny", "--table", str(args.table),
                        "--policy", policy, "--server-python", args.server_python,
                        "--max-num-batched-tokens", str(budget), "--workload", args.workload,
                        "--requests", str(args.requests), "--seed", str(rep),
                        "--tpot-slo", f"{slo:g}", "--max-goodput",
                        "--rate-range", args.rate_range, "--rate-tol", args.rate_tol,
                    ]  # fmt: skip
                    done = subprocess.run(cmd, capture_output=True, text=True)
                    if done.returncode != 0:
                        print(f"{out.name}: failed: {done.stderr.strip()[-300:]}", flush=True)
                        continue
                    doc = json.loads((out / "max_goodput.json").read_text())
                    found.setdefault((budget, slo, policy), []).append(doc["text"])
                    print(f"{out.name}: max goodput {doc['text']} req/s "
                          f"({doc['probes']} probes)", flush=True)  # fmt: skip
    print("\n| token budget | TPOT SLO | SLOWeave | vLLM's scheduler | ratio (medians) |")
    print("| --- | --- | --- | --- | --- |")
    for budget in budgets:
        for slo in slos:
            sw = found.get((budget, slo, "sloweave"), [])
            vl = found.get((budget, slo, "vllm"), [])
            ratio = ""
            try:
                ratio = (
                    f"{statistics.median(map(float, sw)) / statistics.median(map(float, vl)):.2f}x"
                )
            except (ValueError, ZeroDivisionError, statistics.StatisticsError):
                ratio = "n/a"
            print(f"| {budget} | {slo:g} ms | {', '.join(sw)} | {', '.join(vl)} | {ratio} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
