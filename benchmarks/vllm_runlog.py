"""The plug-in's run log over a long run: cost per step and memory stay flat.

Logs ``--steps`` synthetic steps (default 1,000,000) the way a busy server would:
every step ends a decode of ``--running`` requests, a request arrives, prefills and
leaves every few steps; the writer thread appends a part every ``--flush-every``
steps. Every ``--pace`` steps the loop sleeps 1 ms, as a serving loop waits on the
device between steps (a real step takes milliseconds; a loop that never waits would
starve the writer thread of the GIL, which no server does). Prints the serving loop's
own cost per step (sleeps excluded) over the first and the last tenth of
the run, their ratio (1.0: constant), the Python heap (tracemalloc) at each tenth,
and the folder's parts. No vLLM needed::

    python benchmarks/vllm_runlog.py [--steps 1000000] [--flush-every 1000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "costmodels"))
from tablefactory import small_table  # noqa: E402

from servecal.costmodels.segments import parts  # noqa: E402
from servecal.integrations.vllm.runlog import RunLog  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--flush-every", type=int, default=1000)
    ap.add_argument("--running", type=int, default=32, help="requests decoding at once")
    ap.add_argument("--pace", type=int, default=100, help="steps between 1 ms waits")
    args = ap.parse_args()
    if args.steps < 100 or args.flush_every < 1 or args.running < 1:
        print("error: need --steps >= 100, --flush-every >= 1, --running >= 1", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        log = RunLog(Path(tmp) / "run", small_table(), {"policy": "bench"},
                     flush_every=args.flush_every, flush_s=5.0)  # fmt: skip
        tenth = args.steps // 10
        live: list[tuple[str, int]] = []
        lifetime = 200  # steps a request decodes
        block_s: list[float] = []
        slept = 0.0
        heap: list[float] = []
        tracemalloc.start()  # the heap of every thread: rows waiting, step ends kept
        t = time.perf_counter()
        now = 0.0
        for k in range(args.steps):
            chunk = 0
            if len(live) < args.running and k % 7 == 0:
                rid = f"r{k}"
                log.arrived(rid, now, 128, lifetime, 500.0, 25.0)
                chunk = 128
            else:
                rid = None
            row = [now, 2.0, len(live), chunk, 1 if chunk else 0, 900.0, 0.0, 5.0, 20.0,
                   chunk, len(live) + chunk, 2.0]  # fmt: skip
            index = log.step(row)
            now += 2.0
            if rid is not None:
                log.started(rid, index)
                live.append((rid, index))
            while live and index - live[0][1] >= lifetime:
                done, _ = live.pop(0)
                log.finished(done, now, index, lifetime)
            if (k + 1) % args.pace == 0:
                s0 = time.perf_counter()
                time.sleep(0.001)
                slept += time.perf_counter() - s0
            if (k + 1) % tenth == 0:
                block_s.append(time.perf_counter() - t - slept)
                slept = 0.0
                heap.append(tracemalloc.get_traced_memory()[0] / 1e6)
                t = time.perf_counter()
        tracemalloc.stop()
        log.close()
        n_parts = len(parts(Path(tmp) / "run" / "iterations.parquet"))
    per_step = [s / tenth * 1e6 for s in block_s]
    print(f"{args.steps:,} steps, a part every {args.flush_every} steps ({n_parts} parts)")
    print("cost per step by tenth (µs): " + ", ".join(f"{v:.2f}" for v in per_step))
    print("Python heap by tenth (MB):   " + ", ".join(f"{v:.1f}" for v in heap))
    print(f"last tenth / first tenth: {per_step[-1] / per_step[0]:.2f}x per step, "
          f"{heap[-1] / heap[0]:.2f}x heap")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
