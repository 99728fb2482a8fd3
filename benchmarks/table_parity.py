"""CostTable's answers at this tree vs at git revision REV, on random tables and queries.

Every table answer a scheduler or an evaluation reads is compared for equality
(floats bit for bit): ``predict`` (each quantile, scalars, numpy scalars and
arrays), ``margin``, ``energy``, ``max_chunk`` in every mode (P50, P99, P99 + its
margin, P50 + the P99's margin), and the clamped-query counts, on tables of random
axes (both between rules, margins from -0.3 to 0.5) and queries around every grid
value, beyond the edges, and budgets exactly on a chunk's bound and one ulp either
side. Prints how many answers were compared and every difference (none: exit 0)::

    python benchmarks/table_parity.py --baseline REV [--tables 300] [--seed 0]
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

from servecal.costmodels.grid import make_monotone, uncross
from servecal.costmodels.table import AXES, CostTable, Margin

sys.path.insert(0, str(Path(__file__).parent))
from revision import package_at  # noqa: E402


def random_table(rng: np.random.Generator) -> tuple[dict, dict, Margin, np.ndarray, str]:
    """Axes, quantile grids, margin, energy and rule of one random monotone table."""
    tops = {"n_decode": 300, "ctx": 8192, "prefix": 4096, "chunk": 4096}
    sizes = {"n_decode": 5, "ctx": 4, "prefix": 3, "chunk": 9}
    axes = {
        a: sorted(rng.choice(tops[a] + 1, int(rng.integers(1, sizes[a] + 1)), replace=False))
        for a in AXES
    }
    axes = {a: [int(v) for v in vals] for a, vals in axes.items()}
    shape = tuple(len(axes[a]) for a in AXES)
    p50 = make_monotone(rng.gamma(2.0, 2.0, shape))
    p99 = uncross({0.5: p50, 0.99: make_monotone(p50 + rng.gamma(1.0, 1.0, shape))})[0.99]
    margin = Margin(0.99, float(rng.uniform(-0.3, 0.5)), 0.99, None, 1, 100)
    between = "linear" if rng.random() < 0.7 else "round_up"
    return axes, {0.5: p50, 0.99: p99}, margin, p50 * 0.25, between


def near(axis: list[int], rng: np.random.Generator, integer: bool) -> list[float]:
    """Coordinates on, around, between and beyond an axis's values."""
    vals = [axis[0] - 7, axis[-1] + 9, *axis, *rng.uniform(axis[0], axis[-1], 3).tolist()]
    if integer:
        return [max(int(v), 0) for v in vals]
    return (
        vals
        + [math.nextafter(float(v), -math.inf) for v in axis[:2]]
        + [math.nextafter(float(v), math.inf) for v in axis[-2:]]
    )


#: P50 + a negative P99 margin (a bound that can fall along the chunk): how many
#: max_chunk queries per rule, and how many answers differ from the brute force.
falling = {"linear": 0, "round_up": 0}
wrong = {"now": 0, "base": 0}


def largest_by_brute_force(table, n, ctx, p, budget, limit, q, use_margin) -> int:
    """The largest chunk in [1, limit] whose vectorised predict (+ margin) fits, else 0."""
    chunks = np.arange(1, limit + 1)
    full = np.ones(limit)
    costs = table.lookup(q, full * n, chunks, full * ctx, full * p)[0]
    if use_margin:
        costs = costs + table.margin_info.rho * table.lookup(0.99, full * n, chunks,
                                                             full * ctx, full * p)[0]  # fmt: skip
    fits = np.flatnonzero(costs <= budget)
    return int(fits[-1]) + 1 if fits.size else 0


def compare(tables: dict, rng: np.random.Generator, report: list[str]) -> int:
    """Ask every table in ``tables`` the same queries; the differences into ``report``."""
    now, base = tables.values()
    ax = now.axes
    ns = near(list(ax["n_decode"]), rng, True) + [2.5, 7.25]
    ctxs = near(list(ax["ctx"]), rng, False)
    prefixes = near(list(ax["prefix"]), rng, True)
    chunks = near(list(ax["chunk"]), rng, True)
    spare = {"now": now.with_between(now.between), "base": base.with_between(base.between)}
    asked = 0

    def same(label: str, a, b) -> None:
        nonlocal asked
        asked += 1
        equal = np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
        if not equal and not (a != a and b != b):  # (NaN answers alike)
            report.append(f"{label}: {a!r} vs {b!r}")

    for _ in range(30):
        n, ctx, p, c = (rng.choice(v).item() for v in (ns, ctxs, prefixes, chunks))
        for q in (0.5, 0.99):
            same(
                f"predict{(n, c, ctx, p, q)}",
                now.predict(n, c, ctx, p, q),
                base.predict(n, c, ctx, p, q),
            )
        same("margin", now.margin(n, c, ctx, p), base.margin(n, c, ctx, p))
        same("energy", now.energy(n, c, ctx, p), base.energy(n, c, ctx, p))
        n32, ctx32 = np.float32(n), np.float32(ctx)
        same(
            "predict f32", now.predict(n32, c, ctx32, p, 0.99), base.predict(n32, c, ctx32, p, 0.99)
        )
        limit = int(rng.integers(0, max(ax["chunk"]) + 40))
        for q, use_margin in ((0.5, False), (0.99, False), (0.99, True), (0.5, True)):
            bounds = []
            for k in rng.integers(0, limit + 1, 3).tolist():
                at = [t.predict(n, k, ctx, p, q) + (t.margin(n, k, ctx, p) if use_margin else 0.0)
                      for t in (now, base)]  # fmt: skip
                same(f"bound{(n, k, ctx, p, q, use_margin)}", *at)
                bounds.append(at[0])
            budgets = [b for x in bounds for b in (x, math.nextafter(x, -math.inf),
                                                     math.nextafter(x, math.inf))]  # fmt: skip
            falls = q == 0.5 and use_margin and now.margin_info.rho < 0
            for budget in [*budgets, 0.0, -1.0, math.inf, math.nan, float(rng.uniform(0, 40))]:
                args = (n, ctx, p, budget, limit, q, use_margin)
                if not falls:
                    same(f"max_chunk{args}", now.max_chunk(*args), base.max_chunk(*args))
                    continue
                # the bound can fall along the chunk: compared with the brute force
                brute = largest_by_brute_force(now, *args)
                falling[now.between] += 1
                for name, table in spare.items():  # (copies: their counts differ too)
                    wrong[name] += table.max_chunk(*args) != brute
    arrays = [np.array(rng.choice(v, 64)) for v in (ns, chunks, ctxs, prefixes)]
    for q in (0.5, 0.99):
        same("predict arrays", now.predict(*arrays, q=q), base.predict(*arrays, q=q))
        same("lookup", now.lookup(q, *arrays)[0], base.lookup(q, *arrays)[0])
    same("out_of_domain", now.out_of_domain, base.out_of_domain)
    same("beyond_grid", now.beyond_grid, base.beyond_grid)
    return asked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="git revision to compare with")
    parser.add_argument("--tables", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    package = package_at(args.baseline, Path(tempfile.mkdtemp()))
    base_cls = importlib.import_module(f"{package}.costmodels.table").CostTable
    base_margin = importlib.import_module(f"{package}.costmodels.table").Margin
    rng = np.random.default_rng(args.seed)
    report: list[str] = []
    asked = 0
    for _ in range(args.tables):
        axes, grids, margin, energy, between = random_table(rng)
        now = CostTable(axes, grids, margin, energy, between=between)
        base = base_cls(axes, grids, base_margin(**vars(margin)), energy, between=between)
        asked += compare({"now": now, args.baseline: base}, rng, report)
    for line in report[:50]:
        print(line)
    print(f"{args.tables} tables, {asked} answers compared with {args.baseline}: "
          f"{len(report)} differ")  # fmt: skip
    print(f"P50 + a negative P99 margin (the bound can fall), max_chunk queries per rule "
          f"{falling}; answers that are not the largest fitting chunk (brute force): this "
          f"tree {wrong['now']}, {args.baseline} {wrong['base']}")  # fmt: skip
    sys.exit(1 if report or wrong["now"] else 0)


if __name__ == "__main__":
    main()
