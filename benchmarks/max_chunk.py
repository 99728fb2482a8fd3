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

    python benchmarks/max_chunk.py [--queries 300]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from servecal.costmodels.fit import fit_cost_table
from servecal.costmodels.gbm import GBMQuantileRegressor
from servecal.costmodels.predictor import largest_fitting
from servecal.costmodels.synthetic import SyntheticTruth, grid_points

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
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)

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


if __name__ == "__main__":
    main()
