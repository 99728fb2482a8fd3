"""The torch executor's costs, as ratios measured in one run on this host.

1. *Paged vs calibrated*: the executor's forward pass (ragged decode lengths masked,
   the decode group one token further each repeat as in an engine, so its K/V are
   appended to the per-layer contiguous view rather than re-gathered; a prefill's
   prefix gathered block by block from the paged pool) against the profiler's
   calibration pass (one contiguous KV slot per sequence, uniform ``ctx``) on the
   same shape, interleaved, medians of ``--repeats``: how much a calibration of the
   contiguous layout under-predicts a paged engine.
2. *Decode-group change*: rebuilding a layer's decode view for 16 requests of
   lognormal lengths when every row is carried from the previous view (copied at
   its own length) against gathering every row's blocks from the pool.
3. *Operator-level preemption*: a prefill chunk is asked to stop at a random moment
   (a timer thread); the blocking time (request → next operator boundary) against
   the whole pass, which an iteration-level engine would wait for.

    python benchmarks/torch_executor.py [--device cpu] [--repeats 30]
"""

from __future__ import annotations

import argparse
import threading

import numpy as np
import torch

from servecal.profiler.calibrate import resolve_device
from servecal.profiler.design import Point
from servecal.profiler.model import build_model
from servecal.profiler.runner import point_batch
from servecal.profiler.shapes import ModelShape
from servecal.profiler.timing import LayerScale, make_clock, timed_iteration
from servecal.sched.torch_executor.forward import (
    ForwardRun,
    PagedBatch,
    StopSignal,
    rebuild_view,
)
from servecal.sched.torch_executor.pool import PagedKVPool, PoolConfig

SHAPES = [(4, 0, 512, 0), (16, 0, 512, 0), (24, 0, 1024, 0), (0, 256, 0, 0), (8, 256, 512, 1024)]


def paged_batch(model, pool, point: Point, ragged: int, step: int = 0) -> PagedBatch:
    """``point`` on the pool, decode lengths ragged by ``±ragged`` and ``step`` tokens on
    (consecutive steps: the same decode group one token further, as an engine runs it)."""
    n, chunk, ctx, prefix = point.n_decode, point.chunk, point.ctx, point.prefix
    rng = np.random.default_rng(0)
    lengths = [max(1, ctx + int(rng.integers(-ragged, ragged + 1))) + step for _ in range(n)]
    for rid, length in enumerate(lengths):
        pool.reserve(rid, length + 1)
        pool.commit(rid, length)
    prefills = []
    if chunk:
        pool.reserve(10_000, prefix + chunk)
        prefills = [(10_000, prefix, chunk)]
    tokens = torch.randint(0, model.shape.vocab, (n + chunk,), device=model.device)
    return PagedBatch(pool, list(range(n)), lengths, prefills, tokens)


def rebuild_times(shape, layers, device, dtype, repeats: int) -> tuple[float, float, int]:
    """Median ms of one layer's view rebuild: every row carried, and every row gathered."""
    import time

    pool = PagedKVPool(shape, layers, PoolConfig(65_536, 16, 64), device, dtype)
    rng = np.random.default_rng(0)
    lengths = sorted(np.clip(rng.lognormal(np.log(450), 0.7, 16), 50, 2500).astype(int).tolist())
    lengths.reverse()
    for rid, length in enumerate(lengths):
        pool.reserve(rid, length + 1)
        pool.commit(rid, length)
    tokens = torch.zeros(len(lengths), dtype=torch.long, device=device)
    batch = PagedBatch(pool, list(range(len(lengths))), lengths, [], tokens)
    held = rebuild_view(batch, 0, None)
    held.lengths = list(lengths)

    def median_ms(old) -> float:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            rebuild_view(batch, 0, old)
            times.append((time.perf_counter_ns() - t0) / 1e6)
        return float(np.median(times))

    return median_ms(held), median_ms(None), batch.decode_width


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    device = resolve_device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    shape = ModelShape.resolve(args.model)
    layers = min(shape.n_layers, 4)
    model = build_model(shape, device, n_layers=layers)
    scale, clock = LayerScale(layers, shape.n_layers), make_clock(device)
    print("shape (n, chunk, ctx, prefix)  calibrated ms  paged ms  ratio")
    for values in SHAPES:
        point = Point(*values)
        ref_batch, ref_tokens = point_batch(model, point)
        pool = PagedKVPool(shape, layers, PoolConfig(65_536, 16, 64), device, model.dtype)
        ref, paged = [], []
        for rep in range(args.repeats + 3):
            a = scale.estimate(timed_iteration(model, ref_batch, ref_tokens, clock))
            batch = paged_batch(model, pool, point, ragged=point.ctx // 8, step=rep)
            run = ForwardRun(model, batch, clock, scale)
            run.run()
            if rep >= 3:  # warm-up
                ref.append(a)
                paged.append(run.duration_ms)
        r, p = float(np.median(ref)), float(np.median(paged))
        print(f"{str(values):30s} {r:12.2f} {p:9.2f} {p / r:6.2f}")
    carried, gathered, width = rebuild_times(shape, layers, device, model.dtype, args.repeats)
    print(
        f"decode view rebuild, 16 requests (width {width}): every row carried {carried:.2f} ms, "
        f"every row gathered {gathered:.2f} ms per layer ({gathered / carried:.1f}x)"
    )
    pool = PagedKVPool(shape, layers, PoolConfig(65_536, 16, 64), device, model.dtype)
    batch = paged_batch(model, pool, Point(0, 1024, 0, 0), 0)
    whole = []
    for _ in range(5):
        run = ForwardRun(model, batch, clock, scale)
        run.run()
        whole.append(run.duration_ms)
    full = float(np.median(whole))
    rng = np.random.default_rng(1)
    blocking = []
    for _ in range(args.repeats):
        run, signal = ForwardRun(model, batch, clock, scale), StopSignal()
        timer = threading.Timer(float(rng.uniform(0, full / 1000.0)), signal.request)
        timer.start()
        if not run.run(signal):
            blocking.append(run.blocking_ms[0])
            run.run()
        timer.cancel()
    if blocking:
        b = np.asarray(blocking)
        print(
            f"prefill 1024: whole pass {full:.1f} ms; stop request → boundary "
            f"median {np.median(b):.2f} ms, max {b.max():.2f} ms over {b.size} stops "
            f"(median {np.median(b) / full:.2%} of the pass)"
        )


if __name__ == "__main__":
    main()
