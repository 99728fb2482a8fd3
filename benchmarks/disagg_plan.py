"""How long `servecal plan` takes over a space of >= 1,000 configurations (docs/capacity.md).

    python benchmarks/disagg_plan.py [--trace CSV] [--requests 2000] [--rate 100] [--jobs 2]
                                     [--replicas 32] [--small]

The space: the imported A100 and H100 tables (aiconfigurator's vLLM 0.14.0 profiles) at
TP 1 and 2; aggregated with 2 policies × 2 routers; disaggregated with every pairing of
the 4 (prefill, decode) device×TPs × 4 prefill:decode ratios × 4 links × 2 prefill
policies × 2 routers; 1 to ``--replicas`` replicas (aggregated) or units (split). It
writes the plan to a temporary folder, runs ``servecal plan --no-frontier --json`` on
``--jobs`` worker processes and prints: the configurations, the candidate fleets
(configurations × replica counts), the simulations run, the counts settled without a
simulation (a faster link's miss), the wall time, and the cheapest aggregated and
disaggregated answers. ``--small`` is a quick check of the script (1 link, 1 ratio).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "sched" / "data"
CLI = "from servecal.cli import app; app()"


def plan_text(trace: Path, requests: int, rate: float, replicas: int, small: bool) -> str:
    links = '["nvlink"]' if small else '["nvlink", "pcie-gen5", "ib-ndr", "roce-100g"]'
    ratios = "[[1, 1]]" if small else "[[1, 1], [1, 2], [2, 1], [1, 3]]"
    devices = []
    for name, price in (("A100", 2.0), ("H100", 3.5)):
        devices.append(f'[[device]]\nname = "{name}"\nprice_per_gpu_hour = {price}\n')
        for tp in (1, 2):
            d = DATA / f"imported_{name.lower()}x{tp}"
            devices.append(
                f'[[device.tp]]\nsize = {tp}\ntruth = "samples:{d / "samples.csv"}"\n'
                f'predictor = "{d / "table.json"}"\nkv_tokens = {500_000 * tp}\n'
            )
    return f"""
[workload]
trace = "{trace}"
requests = {requests}
rate = {rate}
tpot_slo_ms = 25
seeds = [0]

[target]
attainment = 0.9

[search]
replicas = [1, {replicas}]
policies = [{{name = "sloweave", quantile = 0.5, use_margin = false}}, "fixed-512"]
routers = ["round-robin", {{name = "predicted-latency", quantile = 0.5, use_margin = false}}]

[disaggregated]
prefill_policies = ["fcfs-chunk-512", "edf-chunk-1024"]
ratios = {ratios}
links = {links}
model = "llama-3-8b"
pools = "all"

{"".join(devices)}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=DATA / "azure_conv_head4000.csv")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--replicas", type=int, default=32)
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    from servecal.sched.cluster.space import load_space

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plan.toml"
        text = plan_text(args.trace.resolve(), args.requests, args.rate, args.replicas, args.small)
        path.write_text(text)
        space = load_space(path)
        n_configs = len(space.configs)
        split = sum(1 for h, _, _ in space.configs if getattr(h, "mode", "") == "disaggregated")
        t0 = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", CLI, "plan", str(path), "--out", f"{tmp}/out",
             "--jobs", str(args.jobs), "--no-frontier"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        if out.returncode != 0:
            sys.exit(f"plan failed ({out.returncode}): {out.stderr[-2000:]}")
        doc = json.loads((Path(tmp) / "out" / "plan.json").read_text())
    rows = doc["rows"]
    print(f"configurations: {n_configs} ({n_configs - split} aggregated, {split} disaggregated)")
    print(f"candidate fleets (configurations x 1..{args.replicas}): {n_configs * args.replicas}")
    print(f"trace: {args.trace.name}, {args.requests} requests at {args.rate:g} req/s")
    print(f"simulations: {doc['simulations']} (to the answer: {doc['simulations_to_answer']})")
    print(f"counts settled by a faster link's miss: {sum(r['inferred'] for r in rows)}")
    print(f"configurations simulated at all: {sum(1 for r in rows if r['simulations'])}")
    print(f"wall: {wall:.1f} s on {args.jobs} worker processes (plan's own: {doc['wall_s']:.1f} s)")
    for mode, r in doc["cheapest"].items():
        fleet = r["replicas"] if mode == "aggregated" else (
            f"{r['prefill_replicas']}P+{r['decode_replicas']}D")  # fmt: skip
        print(f"cheapest {mode}: {fleet} x {r['config']}: ${r['cost_per_hour']:.2f}/hour, "
              f"{100 * r['attainment']:.1f}% good")  # fmt: skip


if __name__ == "__main__":
    main()
