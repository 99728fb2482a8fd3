"""max_chunk on a compiled cost table vs a binary search that asks LightGBM per probe.

Both answer the same question (largest chunk whose predicted P99 fits a budget) for
the same random queries, in one run:

* ``table``: ``CostTable.max_chunk`` under the default ``linear`` rule (blend the
  corner rows, bisect the columns, solve the segment), and the same table under
  ``round_up`` (one stored row, ``bisect``);
* ``lgbm probes``: ``largest_fitting`` over 1..limit, each probe one single-row
  ``Booster.predict`` of the fitted LightGBM P99 model, single-threaded (what a
  scheduler would do without a table; the raw Booster is the cheapest way to call it).

Also times the scalar ``predict`` (P50, P99) and ``margin`` calls the engine makes
every iteration. Prints median µs per call and the speed-up ratio.

``--engine-like N`` (default 2,000) also asks a calibrated table (``--table``,
default the fitted A100 table in ``sched/data``) the way the engine and the vLLM
plug-in do: a few decode counts and prefixes that repeat, a float mean context
that moves every time, budgets around the bound of a random chunk. With
``--baseline REV`` the same queries go to the ``CostTable`` of git revision
``REV`` too, on the same table file, in the same process (the answers must agree):

    python benchmarks/max_chunk.py [--queries 300] [--engine-like 2000] [--baseline REV]
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from servecal.costmodels.fit import fit_cost_table
from servecal.costmodels.gbm import GBMQuantileRegressor
from servecal.costmodels.predictor import largest_fitting
from servecal.costmodels.synthetic import SyntheticTruth, grid_points
from servecal.costmodels.table import CostTable

sys.path.insert(0, str(Path(__file__).parent))
from revision import package_at  # noqa: E402

A100 = Path(__file__).resolve().parents[1] / "sched" / "data" / "device_a100_fitted.json"

N_DECODE = [0, 1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128]
CHUNK = [0, 16, 32, 64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096]
LIMIT = 4096


def median_us(fn, args_list) -> float:
    """Median wall time of one call in µs (each call timed on its own)."""
    times = []
    for args in args_list:
        t0 = time.perf_counter_ns()
        fn(*args)
        times.append(time.perf_counter_ns() - t0)
    return float(np.median(times)) / 1000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engine-like", type=int, default=2000)
    parser.add_argument("--table", default=str(A100))
    parser.add_argument("--baseline", default=None, help="also CostTable at this git revision")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    if args.engine_like:
        engine_like(args)

    frame = SyntheticTruth().draw(grid_points(N_DECODE, CHUNK), repeats=20, rng=rng)
    X = frame[["n_decode", "chunk", "ctx", "prefix"]].to_numpy(float)
    gbm = GBMQuantileRegressor(quantiles=(0.99,)).fit(X, frame["ms"].to_numpy())
    booster = gbm.models_[0.99].booster_  # the raw Booster: the cheapest call per probe
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = fit_cost_table(frame, {}, model="lgbm", seed=args.seed).table

    queries = [
        (int(rng.integers(1, 128)), 0, 0, float(rng.uniform(3.0, 30.0)), LIMIT)
        for _ in range(args.queries)
    ]

    def probe_search(n: int, ctx: int, prefix: int, budget: float, limit: int) -> int:
        def fits(c: int) -> bool:
            x = np.array([[n, c, ctx, prefix]], dtype=float)
            return float(booster.predict(x, num_threads=1)[0]) <= budget

        return largest_fitting(fits, limit)

    # warm both paths once (row caches, LightGBM's first-call setup)
    table.max_chunk(*queries[0])
    probe_search(*queries[0])
    t_table = median_us(table.max_chunk, queries)
    rounded = table.with_between("round_up")
    rounded.max_chunk(*queries[0])
    t_rounded = median_us(rounded.max_chunk, queries)
    t_probe = median_us(probe_search, queries)
    pq = [(n, int(rng.integers(0, LIMIT)), 0, 0) for n, *_ in queries]
    t_p50 = median_us(lambda n, c, x, p: table.predict(n, c, x, p, 0.5), pq)
    t_p99 = median_us(lambda n, c, x, p: table.predict(n, c, x, p, 0.99), pq)
    t_margin = median_us(table.margin, pq)

    print(f"queries: {args.queries}, limit {LIMIT}, table grid {table}")
    print(f"CostTable.max_chunk:                   {t_table:9.2f} µs/call (median)")
    print(f"  same table, round_up rule:           {t_rounded:9.2f} µs/call (median)")
    print(f"binary search, LightGBM per probe:     {t_probe:9.2f} µs/call (median)")
    print(f"ratio (probe search / table):          {t_probe / t_table:9.0f}x")
    print(f"CostTable.predict q=0.5 / q=0.99:      {t_p50:9.2f} / {t_p99:.2f} µs/call")
    print(f"CostTable.margin:                      {t_margin:9.2f} µs/call")


def engine_like(args: argparse.Namespace) -> None:
    """``max_chunk`` and ``predict`` on engine-like queries (and at ``--baseline``)."""
    rng = np.random.default_rng(args.seed + 1)
    tables = {"now": CostTable.load(args.table)}
    if args.baseline:
        folder = Path(tempfile.mkdtemp())
        module = importlib.import_module(f"{package_at(args.baseline, folder)}.costmodels.table")
        tables[args.baseline] = module.CostTable.load(args.table)
    table = tables["now"]
    axes = table.axes
    ns = rng.choice(np.arange(1, max(axes["n_decode"]) + 1), 4).tolist()
    prefixes = rng.choice(np.arange(0, max(axes["prefix"]) + 1), 3).tolist()
    queries, asks = [], []
    for _ in range(args.engine_like):
        n, prefix = int(rng.choice(ns)), int(rng.choice(prefixes))
        ctx = float(rng.uniform(0, max(axes["ctx"])))
        chunk = int(rng.integers(1, LIMIT))
        bound = table.predict(n, chunk, ctx, prefix, q=0.99) + table.margin(n, chunk, ctx, prefix)
        queries.append((n, ctx, prefix, float(bound * rng.uniform(0.9, 1.1)), LIMIT))
        asks.append((n, chunk, ctx, prefix))
    answers = {}
    print(f"engine-like queries: {len(queries)} on {Path(args.table).name} ({table})")
    for name, t in tables.items():  # a first pass fills each table's blended-row caches
        answers[name] = [t.max_chunk(*q) for q in queries]
        for q in asks:
            t.predict(*q, q=0.99)
    times = {}
    for name, t in tables.items():
        mc = median_us(t.max_chunk, queries)
        pr = median_us(lambda n, c, x, p, t=t: t.predict(n, c, x, p, 0.99), asks)
        times[name] = (mc, pr)
        print(f"  CostTable.max_chunk at {name:>8}:    {mc:9.2f} µs/call (median)")
        print(f"  CostTable.predict q=0.99 at {name:>8}: {pr:6.2f} µs/call (median)")
    if args.baseline:
        same = answers["now"] == answers[args.baseline]
        print(f"  answers identical to {args.baseline}: {same}")
        (mc, pr), (mc0, pr0) = times["now"], times[args.baseline]
        print(f"  time now / {args.baseline}: max_chunk {mc / mc0:.2f}x, predict {pr / pr0:.2f}x")


if __name__ == "__main__":
    main()
