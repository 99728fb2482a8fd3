"""Is this host's CPU steady enough for two windows of a CPU engine to agree?

One fixed batch (4 decodes, ~500 tokens of context) is stepped through vLLM's CPU
engine, in process, on each of the given CPUs at once (one engine per CPU, its
thread pinned there), for ``--seconds``. Each step is timed as ``calibrate --engine
vllm`` times it. Printed: the median step per time bucket, per CPU, aligned in time,
then per CPU the two levels a 2-means split of the buckets finds (their ratio, the
share of buckets at the slow one) and the correlation of the CPUs' bucket medians.

A steady host shows one level (ratio near 1). On the 2-vCPU KVM development box each
vCPU switched between two speeds about x1.4-x1.5 apart every 5-20 s, independently of the
other and with no steal time: a calibration and a served run in different windows
then time different machines (docs/results/2026-12-02-host-levels.md).

    $SERVECAL_VLLM_CPU_PYTHON benchmarks/host_levels.py --seconds 60 --cpus 0,1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SETTINGS = {
    "dtype": "auto", "kv_cache_bytes": 1 << 30, "max_model_len": 4096,
    "max_num_batched_tokens": 256, "max_num_seqs": 16, "enforce_eager": True,
    "dummy_weights": True, "seed": 0,
}  # fmt: skip
DECODES = 4
PROMPT = 500


def child(model_dir: str, seconds: float) -> None:
    """Step one fixed batch for ``seconds``; print ``[wall time, ms]`` rows as JSON."""
    # the engine in this process (the calibration driver's parent sets the same)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from servecal.integrations.vllm.calibration import _Driver
    from servecal.profiler.shapes import ModelShape

    vocab = ModelShape.resolve("tiny").vocab
    driver = _Driver({**SETTINGS, "model_dir": model_dir, "vocab": vocab})
    rows: list[list[float]] = []
    end = None
    while end is None or time.time() < end:
        ids = [driver._add(PROMPT, 4096 - PROMPT - 1) for _ in range(DECODES)]
        for _ in range(600):  # the batch's contexts stay within ~500-1,100
            got = driver._step(None)
            if got.get("n_decode") == DECODES and not got.get("chunk"):
                end = end or time.time() + seconds
                rows.append([time.time(), got["ms"]])
            if end is not None and time.time() >= end:
                break
        driver.engine.abort_request(ids)
        while driver.engine.has_unfinished_requests():
            driver._step(None)
    print(json.dumps(rows))


def split_levels(medians: list[float]) -> tuple[float, float, float]:
    """Two levels of ``medians`` by 2-means on their logarithm: (fast, slow, slow share)."""
    logs = sorted(math.log(m) for m in medians)
    best = (math.inf, 0)
    for k in range(1, len(logs)):
        lo, hi = logs[:k], logs[k:]
        cost = sum((x - statistics.fmean(lo)) ** 2 for x in lo) + sum(
            (x - statistics.fmean(hi)) ** 2 for x in hi
        )
        best = min(best, (cost, k))
    k = best[1]
    fast, slow = math.exp(statistics.median(logs[:k])), math.exp(statistics.median(logs[k:]))
    return fast, slow, (len(logs) - k) / len(logs)


def buckets(rows: list[list[float]], t0: float, width: float) -> dict[int, float]:
    groups: dict[int, list[float]] = {}
    for t, ms in rows:
        if t >= t0:
            groups.setdefault(int((t - t0) // width), []).append(ms)
    return {k: statistics.median(v) for k, v in groups.items() if len(v) >= 5}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--cpus", default="0,1", help="comma-separated CPUs, one engine each")
    parser.add_argument("--bucket", type=float, default=2.0, help="seconds per bucket")
    parser.add_argument(
        "--child", nargs=2, metavar=("MODEL_DIR", "SECONDS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        child(args.child[0], float(args.child[1]))
        return 0
    from servecal.profiler.model_folder import write_model_folder

    cpus = [int(c) for c in args.cpus.split(",")]
    model = write_model_folder("tiny", Path(tempfile.mkdtemp()) / "model")
    procs = {}
    for cpu in cpus:
        env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "OMP_NUM_THREADS": "1",
               "OMP_PLACES": f"{{{cpu}}}", "OMP_PROC_BIND": "true"}  # fmt: skip
        cmd = ["taskset", "-c", str(cpu), sys.executable, __file__, "--child", str(model),
               str(args.seconds)]  # fmt: skip
        procs[cpu] = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
    series = {cpu: json.loads(p.communicate()[0].decode().strip().splitlines()[-1])
              for cpu, p in procs.items()}  # fmt: skip
    t0 = max(rows[0][0] for rows in series.values())
    per_cpu = {cpu: buckets(rows, t0, args.bucket) for cpu, rows in series.items()}
    for cpu, b in per_cpu.items():
        print(f"cpu{cpu} ms/{args.bucket:g}s:", " ".join(f"{b[k]:.1f}" for k in sorted(b)))
    for cpu, b in per_cpu.items():
        fast, slow, share = split_levels(list(b.values()))
        print(f"cpu{cpu}: {len(series[cpu])} steps, levels {fast:.2f} / {slow:.2f} ms "
              f"(x{slow / fast:.2f}), {share:.0%} of buckets slow")  # fmt: skip
    if len(cpus) == 2:
        a, b = per_cpu[cpus[0]], per_cpu[cpus[1]]
        common = sorted(set(a) & set(b))
        r = statistics.correlation([a[k] for k in common], [b[k] for k in common])
        print(f"correlation of the two CPUs' bucket medians: {r:+.2f} ({len(common)} buckets)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
