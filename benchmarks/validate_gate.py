"""The ``servecal validate`` gate, measured: false alarms, power, stability, cost.

    python benchmarks/validate_gate.py [--sets 1000] [--fits 200] [--power-sets 200]

Truth: :class:`SyntheticTruth` with attention terms (so ``ctx`` and ``prefix``
matter) and 0.3% stalls of 2x, on a 4 x 4 x 3 x 2 calibration grid (96 points x 20
repeats). Scenarios, each over many independent sample sets:

* **same truth, off grid**: one fitted table; fresh sets of 150 points drawn
  *between* grid values (inside the hull), 25 repeats each. Model and
  interpolation error included: what an operator's fresh calibration looks like;
* **own samples**: a fresh calibration per set, fitted, validated against itself;
* **null's edge**: the table is the truth's exact median (compiled on the grid,
  samples on grid points), and every point of the samples is slower by exactly
  the tolerance (×1.05): the worst case the false-alarm bound has to hold for; at
  σ = 0.05 (25 repeats) and at a noisy CPU's σ = 0.30 with 5% stalls of 2.5x (5
  repeats);
* **power**: the off-grid sets slowed uniformly by ×1.06 … ×1.15; the noisy
  on-grid sets slowed ×1.10 and ×1.20; and one band (chunk ≥ 1024) slowed ×1.20
  (is the band named, and only it?);
* **partial drift** (``--only partial``): the audit's case, on a CPU ``tiny``-sized
  grid (chunks 16-128, 232 points x 20): every point with chunk >= 64 (40% of the
  rows, all inside the ``chunk 1-255`` band with undrifted points) x1.15, on the exact
  table at sigma 0.03 and 0.05 (is the found region's chunk extent 64-128?), with
  the same grid's false alarms (same truth; null's edge); and on a table fitted per
  set, validated against its calibration unchanged and slowed;
* **regional drift** (``--only region``): every iteration with chunk ≥ 256, or with
  ≥ 32 decodes, ×1.15 slower, on the grid calibration, on off-grid sets, and on a
  demo-sized calibration (42 grid points × 10 repeats, the table exact) where the
  region holds 29% of the rows; with the same small grid's false alarms (same
  truth, and every point off by exactly the tolerance).

Each line gives the share of ``drifted`` verdicts (with a Clopper–Pearson 95%
interval) and of ``undecided`` ones (the verdict would flip with one row
removed), and the median wall time of one call. Brute-force deletion of every
row on a few sets checks the exact stability check.
"""

from __future__ import annotations

import argparse
import math
import os
import time
import warnings
from collections.abc import Callable
from statistics import NormalDist

import numpy as np
import pandas as pd
from scipy import stats

from servecal.costmodels.drift.replay import replay
from servecal.costmodels.fit import compile_predictor, fit_cost_table
from servecal.costmodels.synthetic import SyntheticTruth, grid_points
from servecal.costmodels.table import CostTable

AXES = {"n_decode": [1, 8, 32, 64], "chunk": [0, 128, 512, 1024], "ctx": [256, 1024, 4096],
        "prefix": [0, 512]}  # fmt: skip
TRUTH = SyntheticTruth(decode_attention=2e-5, prefill_attention=1e-6, sigma=0.05)
TOLERANCE = 0.05


def calibration(rng: np.random.Generator, truth: SyntheticTruth = TRUTH, repeats: int = 20):
    points = grid_points(AXES["n_decode"], AXES["chunk"], AXES["ctx"], AXES["prefix"])
    return truth.draw(points, repeats, rng)


def off_grid(rng: np.random.Generator, points: int = 150, repeats: int = 25) -> pd.DataFrame:
    pts = pd.DataFrame(
        {
            "n_decode": rng.integers(2, 64, points),
            "chunk": rng.integers(1, 1024, points),
            "ctx": rng.integers(257, 4096, points),
            "prefix": rng.integers(1, 512, points),
        }
    )
    return TRUTH.draw(pts, repeats, rng)


def fit(frame: pd.DataFrame, seed: int = 0) -> CostTable:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit_cost_table(frame, {"source": "benchmark"}, seed=seed).table


class ExactMedian:
    """The truth's own quantiles (log-normal reading), to compile an exact table."""

    def __init__(self, truth: SyntheticTruth) -> None:
        self.truth = truth

    def predict(self, n, c, ctx=0, prefix=0, q=0.5):  # noqa: ANN001, ANN201
        z = NormalDist().inv_cdf(q)
        med = self.truth.median(*(np.asarray(x, dtype=float) for x in (n, c, ctx, prefix)))
        return med * math.exp(self.truth.sigma * z * 1.3)  # a generous P99: stalls too


def noise_median(truth: SyntheticTruth) -> float:
    """The median of ``actual / median`` under the truth's noise *with* its stalls: the
    stalls move the distribution's median above the log-normal one."""

    def cdf(x: float) -> float:
        z = math.log(x) / truth.sigma
        stalled = (math.log(x) - math.log(truth.spike_scale)) / truth.sigma
        p = truth.spike_prob
        return (1 - p) * stats.norm.cdf(z) + p * stats.norm.cdf(stalled)

    lo, hi = 0.5, 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if cdf(mid) < 0.5 else (lo, mid)
    return 0.5 * (lo + hi)


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    lo = 0.0 if k == 0 else float(stats.beta.ppf(0.025, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(0.975, k + 1, n - k))
    return lo, hi


def run(name: str, sets: int, one: Callable[[int], dict]) -> dict:
    drifted = undecided = 0
    times = []
    for i in range(sets):
        t0 = time.perf_counter()
        r = one(i)
        times.append(time.perf_counter() - t0)
        drifted += r["verdict"] == "drifted"
        undecided += r["verdict"] == "undecided"
    lo, hi = clopper_pearson(drifted, sets)
    line = (
        f"{name:<44} sets {sets:5d}  drifted {drifted / sets:7.2%} [{lo:.2%}, {hi:.2%}]  "
        f"undecided {undecided / sets:6.2%}  {1000 * float(np.median(times)):6.1f} ms/set"
    )
    print(line, flush=True)
    return {"drifted": drifted, "undecided": undecided, "sets": sets}


def brute_force(table: CostTable, frame: pd.DataFrame, rows: int, rng) -> tuple[int, int]:
    """Delete ``rows`` random rows one at a time; (flips seen, flips the check predicted)."""
    full = replay(table, frame)
    flips = 0
    for i in rng.choice(len(frame), rows, replace=False):
        flips += replay(table, frame.drop(index=i))["verdict"] != full["verdict"]
    return flips, 0 if full["stability"]["stable"] else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=int, default=1000, help="sets per false-alarm scenario")
    ap.add_argument("--fits", type=int, default=200, help="calibrations fitted (own samples)")
    ap.add_argument("--power-sets", type=int, default=200, help="sets per power scenario")
    ap.add_argument("--only", default="false,edge,power,region,partial,stability",
                    help="comma list of scenario groups to run")  # fmt: skip
    args = ap.parse_args()
    only = set(args.only.split(","))
    print(f"load average at start: {os.getloadavg()}")
    table = fit(calibration(np.random.default_rng(1)))

    if "false" in only:
        print("\n# false alarms (the bound: 1% per call)")
        run("same truth, off grid (150 pts x 25)", args.sets,
            lambda i: replay(table, off_grid(np.random.default_rng(10_000 + i))))  # fmt: skip

        def own(i: int) -> dict:
            frame = calibration(np.random.default_rng(20_000 + i))
            return replay(fit(frame, i), frame)

        run("own samples (fit per set, 96 pts x 20)", args.fits, own)

    points = grid_points(AXES["n_decode"], AXES["chunk"], AXES["ctx"], AXES["prefix"])
    exact = compile_predictor(ExactMedian(TRUTH), AXES, quantiles=(0.5, 0.99))
    edge = math.log1p(TOLERANCE)  # exactly at the tolerance: the null's boundary

    def at_edge(truth: SyntheticTruth, repeats: int) -> Callable[[int], dict]:
        def one(i: int) -> dict:
            frame = truth.draw(points, repeats, np.random.default_rng(30_000 + i))
            # every point's true median off by exactly the whole tolerance
            frame["ms"] *= math.exp(edge) / noise_median(truth)
            return replay(exact, frame)

        return one

    noisy = SyntheticTruth(decode_attention=2e-5, prefill_attention=1e-6, sigma=0.30,
                           spike_prob=0.05, spike_scale=2.5)  # fmt: skip
    if "edge" in only:
        print("\n# the null's edge (every point off by exactly the tolerance)")
        run("null's edge, sigma 0.05, 25 reps", args.sets, at_edge(TRUTH, 25))
        run("null's edge, sigma 0.30 + 5% stalls, 5 reps", args.sets, at_edge(noisy, 5))
    if "power" in only:
        power(args, table, exact, noisy, points)
    if "region" in only:
        regional(args, table)
    if "partial" in only:
        partial(args)
    if "stability" in only:
        stability(table)


def power(args, table, exact, noisy, points) -> None:  # noqa: ANN001
    print("\n# power (off-grid sets slowed)")
    for factor in (1.06, 1.08, 1.10, 1.15):

        def slowed(i: int, f: float = factor) -> dict:
            frame = off_grid(np.random.default_rng(40_000 + i))
            frame["ms"] *= f
            return replay(table, frame)

        run(f"uniform x{factor:.2f}", args.power_sets, slowed)

    for factor in (1.10, 1.20):

        def noisy_slowed(i: int, f: float = factor) -> dict:
            frame = noisy.draw(points, 5, np.random.default_rng(45_000 + i))
            frame["ms"] *= f
            return replay(exact, frame)

        run(f"sigma 0.30 + 5% stalls, 5 reps, x{factor:.2f}", args.power_sets, noisy_slowed)

    named, edged = [0], [0]

    def one_band(i: int) -> dict:
        frame = calibration(np.random.default_rng(50_000 + i))
        frame.loc[frame["chunk"] >= 1024, "ms"] *= 1.2
        r = replay(table, frame)
        bands = [r_ for r_ in r["regions"] if r_["axis"] != "points"]  # the fixed bands
        moved = [reg["region"] for reg in bands if reg["status"] == "drift"]
        named[0] += moved == ["chunk 1024+"]
        found = [reg for reg in r["regions"] if reg["axis"] == "points"]
        edged[0] += bool(found) and found[0]["extent"]["chunk"] == [1024, 1024]
        return r

    run("band chunk 1024+ x1.20 (on grid, 96 pts x 20)", args.power_sets, one_band)
    print(f"  ... named exactly the chunk 1024+ band in {named[0]} of {args.power_sets} sets; "
          f"found points' chunk extent exactly 1024 in {edged[0]}")  # fmt: skip


#: Demo-sized calibrations (42 grid points): the tail region holds 2 of 7 values.
SMALL = {
    "chunk": {"n_decode": [1, 2, 4, 8, 16, 24], "chunk": [0, 32, 64, 128, 200, 300, 1500],
              "ctx": [256], "prefix": [0]},
    "n_decode": {"n_decode": [1, 2, 4, 8, 16, 48, 96], "chunk": [0, 64, 128, 200, 300, 1500],
                 "ctx": [256], "prefix": [0]},
}  # fmt: skip
EDGES = {"chunk": 256, "n_decode": 32}


def regional(args, table) -> None:  # noqa: ANN001
    """A region (chunk ≥ 256, n_decode ≥ 32) slowed ×1.15: reported, and named?"""
    print("\n# regional drift: one region x1.15 (is it reported, and is it named?)")

    def scenario(label: str, axis: str, draw: Callable[[int], pd.DataFrame], on) -> None:  # noqa: ANN001
        edge, named, shares = EDGES[axis], [0], []

        def one(i: int) -> dict:
            frame = draw(i)
            inside = frame[axis] >= edge
            shares.append(float(inside.mean()))
            frame.loc[inside, "ms"] *= 1.15
            r = replay(on, frame)
            named[0] += f"{axis} {edge}+" in [
                reg["region"] for reg in r["regions"] if reg["status"] == "drift"
            ]
            return r

        run(label, args.power_sets, one)
        print(f"  ... {axis} {edge}+ named in {named[0]} of {args.power_sets} sets; "
              f"the region holds {100 * float(np.mean(shares)):.0f}% of the rows")  # fmt: skip

    for axis in ("chunk", "n_decode"):
        scenario(f"on grid, {axis} >= {EDGES[axis]} x1.15 (96 pts x 20)", axis,
                 lambda i: calibration(np.random.default_rng(70_000 + i)), table)  # fmt: skip
        scenario(f"off grid, {axis} >= {EDGES[axis]} x1.15 (150 pts x 25)", axis,
                 lambda i: off_grid(np.random.default_rng(75_000 + i)), table)  # fmt: skip
    for axis, axes in SMALL.items():
        exact = compile_predictor(ExactMedian(TRUTH), axes, quantiles=(0.5, 0.99))
        pts = grid_points(axes["n_decode"], axes["chunk"], axes["ctx"], axes["prefix"])

        def small(i: int, pts: pd.DataFrame = pts) -> pd.DataFrame:
            return TRUTH.draw(pts, 10, np.random.default_rng(80_000 + i))

        scenario(f"42 pts x 10 (demo-sized), {axis} >= {EDGES[axis]} x1.15", axis, small, exact)

        def same(i: int, pts: pd.DataFrame = pts, exact: CostTable = exact) -> dict:
            return replay(exact, TRUTH.draw(pts, 10, np.random.default_rng(85_000 + i)))

        def at_edge(i: int, pts: pd.DataFrame = pts, exact: CostTable = exact) -> dict:
            frame = TRUTH.draw(pts, 10, np.random.default_rng(90_000 + i))
            frame["ms"] *= (1 + TOLERANCE) / noise_median(TRUTH)
            return replay(exact, frame)

        run(f"42 pts x 10 ({axis} grid): same truth", args.sets, same)
        run(f"42 pts x 10 ({axis} grid): null's edge", args.sets, at_edge)


#: A CPU ``tiny`` calibration's shape (``calibrate --device cpu --model tiny``: chunks
#: 16-128 beside decode-only points): the audit's partial drift lies inside one band.
CPU_AXES = {"n_decode": [0, 1, 2, 4, 8, 16], "chunk": [0, 16, 32, 64, 128],
            "ctx": [16, 64, 128, 256], "prefix": [0, 32]}  # fmt: skip


def partial(args) -> None:  # noqa: ANN001
    """The audit's case: every point with chunk >= 64 (40% of the rows, all in the
    ``chunk 1-255`` band with the undrifted ones) x1.15. Drifted? Is the found
    region's chunk extent exactly 64-128? And the same grid's false alarms."""
    print("\n# partial drift inside one band: CPU-sized grid (chunks 16-128), chunk >= 64 x1.15")
    pts = grid_points(CPU_AXES["n_decode"], CPU_AXES["chunk"], CPU_AXES["ctx"],
                      CPU_AXES["prefix"])  # fmt: skip
    pts = pts[(pts["n_decode"] > 0) | (pts["chunk"] > 0)].reset_index(drop=True)

    def found_edge(r: dict) -> bool:
        found = [reg for reg in r["regions"] if reg["axis"] in ("points", "half-space")]
        return bool(found) and (
            found[0].get("extent", {}).get("chunk") == [64, 128]
            or found[0]["region"] == "slowdown in half-space chunk 64+"
        )

    heavy = {"sigma": 0.30, "spike_prob": 0.05, "spike_scale": 2.5}  # a loaded host's shape
    for noise in ({"sigma": 0.03}, {"sigma": 0.05}, {"sigma": 0.10}, heavy):
        truth = SyntheticTruth(decode_attention=2e-5, prefill_attention=1e-6, **noise)
        exact = compile_predictor(ExactMedian(truth), CPU_AXES, quantiles=(0.5, 0.99))
        edges = [0]

        def slowed(
            i: int, truth: SyntheticTruth = truth, exact: CostTable = exact, edges: list = edges
        ) -> dict:
            frame = truth.draw(pts, 20, np.random.default_rng(95_000 + i))
            frame.loc[frame["chunk"] >= 64, "ms"] *= 1.15
            r = replay(exact, frame)
            edges[0] += found_edge(r)
            return r

        def same(i: int, truth: SyntheticTruth = truth, exact: CostTable = exact) -> dict:
            return replay(exact, truth.draw(pts, 20, np.random.default_rng(96_000 + i)))

        def at_edge(i: int, truth: SyntheticTruth = truth, exact: CostTable = exact) -> dict:
            frame = truth.draw(pts, 20, np.random.default_rng(97_000 + i))
            frame["ms"] *= (1 + TOLERANCE) / noise_median(truth)
            return replay(exact, frame)

        label = f"{len(pts)} pts x 20, sigma {noise['sigma']}" + (
            " + 5% stalls x2.5" if "spike_prob" in noise else ""
        )
        run(f"{label}: chunk >= 64 x1.15", args.power_sets, slowed)
        print(f"  ... first region found (points' extent or half-space) exactly chunk 64-128 "
              f"in {edges[0]} of "
              f"{args.power_sets} sets")  # fmt: skip
        run(f"{label}: same truth", args.sets, same)
        run(f"{label}: null's edge", args.sets, at_edge)

    # the issue's own form: a table fitted on the calibration, validated against the
    # calibration unchanged and with its upper chunk half slowed
    truth = SyntheticTruth(decode_attention=2e-5, prefill_attention=1e-6, sigma=0.03)
    fitted: dict[int, tuple[CostTable, pd.DataFrame]] = {}  # one fit per set, both verdicts

    def calibrated(i: int) -> tuple[CostTable, pd.DataFrame]:
        """Set ``i``'s calibration and the table fitted on it (fitted once)."""
        if i not in fitted:
            frame = truth.draw(pts, 20, np.random.default_rng(98_000 + i))
            fitted[i] = (fit(frame, i), frame)
        return fitted[i]

    def own(i: int, factor: float) -> dict:
        table, frame = calibrated(i)
        frame = frame.assign(ms=np.where(frame["chunk"] >= 64, frame["ms"] * factor, frame["ms"]))
        return replay(table, frame)

    label = f"own table (fit per set), {len(pts)} pts x 20, sigma 0.03"
    run(f"{label}: unchanged", args.fits, lambda i: own(i, 1.0))
    run(f"{label}: chunk >= 64 x1.15", args.fits, lambda i: own(i, 1.15))

    # a fresh measurement of the same device on the calibration's own points: the table
    # (and its calibration medians) from one draw, the samples from another
    def fresh(i: int, factor: float) -> dict:
        frame = truth.draw(pts, 20, np.random.default_rng(99_000 + i))
        frame.loc[frame["chunk"] >= 64, "ms"] *= factor
        return replay(calibrated(i)[0], frame)

    label = f"fresh draw on the table's points, {len(pts)} pts x 20, sigma 0.03"
    run(f"{label}: same truth", args.fits, lambda i: fresh(i, 1.0))
    run(f"{label}: chunk >= 64 x1.15", args.fits, lambda i: fresh(i, 1.15))


def stability(table: CostTable) -> None:
    print("\n# stability: brute-force single-row deletions")
    rng = np.random.default_rng(7)
    for label, factor in (("same truth", 1.0), ("x1.10", 1.10)):
        flips = predicted = 0
        for k in range(3):
            frame = off_grid(np.random.default_rng(60_000 + k))
            frame["ms"] *= factor
            f, p = brute_force(table, frame, 200, rng)
            flips, predicted = flips + f, predicted + p
        print(f"{label:<12} 3 sets x 200 deletions: {flips} flips (marked fragile: {predicted})")


if __name__ == "__main__":
    main()
