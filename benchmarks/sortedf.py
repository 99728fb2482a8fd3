"""Sorted-F offline benchmark: solver times at n = 2000 on 2 cores, and the sweeps.

    python benchmarks/sortedf.py                 # solver/simulator times, 3 instances
    python benchmarks/sortedf.py --sweep         # where Sorted-F's gain grows and vanishes
    python benchmarks/sortedf.py --gap           # gap to the LP bound at n <= 200
    python benchmarks/sortedf.py --gap --polish 100000 --gap-memory 8192
                                                 # ... with Sorted-F's list polished
    python benchmarks/sortedf.py --gap --gap-n 200 --gap-memory 8192
                                                 # one size, one memory
    python benchmarks/sortedf.py --polish-curve --n 200 --memory 8192
                                                 # polished gap by number of moves
    python benchmarks/sortedf.py --online        # Sorted-F-Online in the reference engine
    python benchmarks/sortedf.py --phase2        # Sorted-F's Phase-2 admission rules compared
    python benchmarks/sortedf.py --tiny 1000     # ratios to the exact optimum, 1000 instances

Times are wall-clock seconds measured in this run, pinned to 2 cores (as CI);
the budget line reports Sorted-F's solver time as a ratio of the 10 s target.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "2")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from servecal.sched.sortedf import algorithms as alg  # noqa: E402
from servecal.sched.sortedf.admission import admit_by_group, admit_in_order  # noqa: E402
from servecal.sched.sortedf.batching import as_list, form_batches  # noqa: E402
from servecal.sched.sortedf.generate import short_long  # noqa: E402
from servecal.sched.sortedf.lp import lp_order, lp_relaxation  # noqa: E402
from servecal.sched.sortedf.model import Segments, score_schedule  # noqa: E402
from servecal.sched.sortedf.runner import OfflineConfig, run_instance  # noqa: E402

BUDGET_S = 10.0
SOLVER_TOTAL = "sorted-f solver total (phase 1 + 'best' phase 2)"


def _pin_two_cores() -> str:
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))[:2]
        os.sched_setaffinity(0, cores)
        return f"pinned to cores {cores}"
    return "not pinned (no sched_setaffinity)"


#: CPU seconds of each timed call, next to its wall seconds: on a shared machine
#: wall time includes waiting for the cores, CPU time does not.
CPU: dict[str, list[float]] = {}


def _timed(fn, *args):
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args)
    _timed.cpu = time.process_time() - c0  # type: ignore[attr-defined]
    return out, time.perf_counter() - t0


def timings(n: int, memory: int, seeds: int) -> None:
    rows: dict[str, list[float]] = {}
    # The executor is compiled by numba on its first call (or loaded from the cache);
    # timed apart so that the rows below are steady-state.
    _, first = _timed(
        admit_in_order, short_long(4, 0.8, memory, np.random.default_rng(0)), [0, 1, 2, 3]
    )
    print(f"executor's first call (numba compile, or load from its cache): {first:.2f} s")

    def add(name: str, secs: float, cpu: float | None = None) -> None:
        rows.setdefault(name, []).append(secs)
        CPU.setdefault(name, []).append(_timed.cpu if cpu is None else cpu)

    for seed in range(seeds):
        inst = short_long(n, 0.8, memory, np.random.default_rng(seed))
        batches, t = _timed(form_batches, inst.s, inst.o, inst.memory, "auto")
        add("sorted-f phase 1 (auto solver by n)", t)
        order, group = as_list(batches)
        starts, t = _timed(admit_by_group, inst, order, group)
        add("sorted-f phase 2 'batch' (skip within a batch)", t)
        _, t = _timed(admit_by_group, inst, order, group, 1)
        add("sorted-f phase 2 'batch', lookahead 1", t)
        _, t = _timed(alg.sorted_f, inst)
        add(SOLVER_TOTAL, t)
        _, t = _timed(admit_in_order, inst, order)
        add("sorted-f phase 2, head-of-line rule", t)
        _, t = _timed(score_schedule, inst, Segments.from_starts(starts, inst.o))
        add("simulator (every step checked)", t)
        _, t = _timed(alg.fcfs, inst)
        add("fcfs", t)
        _, t = _timed(alg.mc_sf, inst)
        add("mc-sf", t)
        horizon = alg.default_horizon(inst)
        lp, t = _timed(lp_relaxation, inst, horizon)
        add("LP relaxation (HiGHS)", t)
        _, t = _timed(admit_in_order, inst, lp_order(inst, lp))
        add("sorted-lp phase 2", t)
        _, t = _timed(alg.sorted_f_amin, inst, np.random.default_rng(seed), 0.5)
        add("sorted-f+amin (plan + execute)", t)
        small = inst.subset(np.arange(min(500, n)))
        _, t = _timed(form_batches, small.s, small.o, small.memory, "swap")
        add(f"phase 1 swap search, n = {small.n}", t)
        tiny = inst.subset(np.arange(min(100, n)))
        _, t = _timed(form_batches, tiny.s, tiny.o, tiny.memory, "dp")
        add(f"phase 1 exact DP, n = {tiny.n}", t)
    print(f"n = {n}, M = {memory}, short-long:0.8, {seeds} instances")
    print(f"  {'seconds':<48} {'wall mean':>9} {'wall max':>9} {'cpu mean':>9} {'cpu max':>9}")
    for name, vals in rows.items():
        cpu = CPU[name]
        print(
            f"  {name:<48} {np.mean(vals):9.3f} {np.max(vals):9.3f} "
            f"{np.mean(cpu):9.3f} {np.max(cpu):9.3f}"
        )
    worst, worst_cpu = max(rows[SOLVER_TOTAL]), max(CPU[SOLVER_TOTAL])
    print(
        f"sorted-f solver, worst instance: wall {worst:.2f} s = {worst / BUDGET_S:.2f} × "
        f"the 10 s budget; CPU {worst_cpu:.2f} s = {worst_cpu / BUDGET_S:.2f} ×"
    )


def sweep(n: int, seeds: int) -> None:
    cfg = OfflineConfig(algos=("fcfs", "mc-sf", "sorted-f"), lp_bound=False)

    def row(label: str, frac: float, memory: int) -> None:
        f_vs, m_vs, ev = [], [], []
        for seed in range(seeds):
            inst = short_long(n, frac, memory, np.random.default_rng(seed))
            oc = run_instance(inst, cfg, np.random.default_rng(seed))
            sf = oc.algos["sorted-f"].sim.mean_latency
            f_vs.append(oc.algos["fcfs"].sim.mean_latency / sf)
            m_vs.append(oc.algos["mc-sf"].sim.mean_latency / sf)
            ev.append(oc.algos["fcfs"].sim.evictions)
        print(
            f"  {label:<22} FCFS/Sorted-F {np.mean(f_vs):5.2f}×   MC-SF/Sorted-F "
            f"{np.mean(m_vs):5.2f}×   FCFS evictions {np.mean(ev):7.0f}",
            flush=True,
        )

    print(f"n = {n}, {seeds} seeds; mean-latency ratios (higher = bigger Sorted-F gain)")
    print("memory sweep, short-long:0.8")
    for memory in (8192, 16384, 65536, 262144, 1048576, 4194304):
        row(f"M = {memory}", 0.8, memory)
    print("mix sweep, M = 16384")
    for frac in (0.0, 0.2, 0.5, 0.8, 0.95, 1.0):
        row(f"short fraction {frac}", frac, 16384)


def gap(
    seeds: int,
    memories: tuple[int, ...] = (8192, 16384, 65536),
    polish: int = 0,
    sizes: tuple[int, ...] = (25, 50, 100, 200),
) -> None:
    cfg = OfflineConfig(algos=("mc-sf", "sorted-f", "sorted-lp"), lp_bound=True)
    print(f"gap = mean latency / LP lower bound, short-long:0.8, {seeds} seeds (mean, max)")
    if polish:
        print(f"sorted-f-polished = sorted-f with {polish} polish moves (seeded by the instance)")
    print(
        "sorted-f = Phase 2 'best' (default); sorted-f-batch = 'batch'; "
        "sorted-f+1 = 'batch' with lookahead 1; sorted-f-head = head-of-line Phase 2"
    )
    for memory in memories:
        for n in sizes:
            gaps: dict[str, list[float]] = {}
            lp_s, lp_int, polish_s = [], [], []
            for seed in range(seeds):
                inst = short_long(n, 0.8, memory, np.random.default_rng(seed))
                oc = run_instance(inst, cfg, np.random.default_rng(seed))
                lp_s.append(oc.lp_s)
                lp_int.append(oc.lp.intervals)
                for name, a in oc.algos.items():
                    gaps.setdefault(name, []).append(a.sim.mean_latency / oc.lp.mean)
                for name, seg in (
                    ("sorted-f-batch", alg.sorted_f(inst, phase2="batch")),
                    ("sorted-f+1", alg.sorted_f(inst, phase2="batch", lookahead=1)),
                    ("sorted-f-head", alg.sorted_f(inst, phase2="head")),
                ):
                    gaps.setdefault(name, []).append(
                        score_schedule(inst, seg).mean_latency / oc.lp.mean
                    )
                if polish:
                    seg, t = _timed(alg.sorted_f, inst, "auto", "best", 0, polish, seed)
                    polish_s.append(t)
                    gaps.setdefault("sorted-f-polished", []).append(
                        score_schedule(inst, seg).mean_latency / oc.lp.mean
                    )
            cells = "   ".join(f"{k} {np.mean(v):.3f} {np.max(v):.3f}" for k, v in gaps.items())
            polished = (
                f", polished in {np.mean(polish_s):.1f} s "
                f"({1e3 * np.mean(polish_s) / polish:.2f} ms/move), each instance: "
                + " ".join(f"{g:.4f}" for g in gaps["sorted-f-polished"])
                if polish
                else ""
            )
            print(
                f"  M = {memory:>6}, n = {n:>3}: {cells}   | LP {np.mean(lp_s):.1f} s, "
                f"{np.mean(lp_int):.0f} intervals{polished}",
                flush=True,
            )


def polish_curve(n: int, memory: int, seeds: int, checkpoints: tuple[int, ...]) -> None:
    """Gap of polished Sorted-F after each number of moves in ``checkpoints`` (the
    polish is resumed from the last list with the same generator, which gives
    exactly the schedule of one run of that many moves)."""
    from servecal.sched.sortedf.polish import polish

    print(f"polished Sorted-F's gap to the LP bound by moves, n = {n}, M = {memory}")
    for seed in range(seeds):
        inst = short_long(n, 0.8, memory, np.random.default_rng(seed))
        bound = lp_relaxation(inst, horizon=alg.default_horizon(inst)).total
        batches = form_batches(inst.s, inst.o, inst.memory, "auto")
        order, group = as_list(batches)
        rng = np.random.default_rng(seed)  # as sorted_f(..., seed=seed)
        cells, done, t0 = [], 0, time.perf_counter()
        for k in (0, *checkpoints):
            order, group, starts = polish(inst, order, group, k - done, rng)
            done = k
            cells.append(f"{k}: {(starts + inst.o).sum() / bound:.4f}")
        secs = time.perf_counter() - t0
        print(f"  seed {seed}: " + "  ".join(cells) + f"   ({secs:.0f} s)", flush=True)


def tiny(count: int) -> None:
    from servecal.sched.sortedf.exact import exact_optimum
    from servecal.sched.sortedf.generate import random_tiny

    rng = np.random.default_rng(48)
    ratio: dict[str, list[float]] = {}
    lb_ratio: dict[str, list[float]] = {}
    for _ in range(count):
        inst = random_tiny(rng, n_max=6, o_max=6, s_max=8)
        opt, _ = exact_optimum(inst)
        horizon = alg.default_horizon(inst)
        for label, fams in (("area rows only", ("area",)), ("default rows", None)):
            lb = lp_relaxation(inst, horizon, families=fams).total
            lb_ratio.setdefault(label, []).append(opt / lb)
        for name, seg in (
            ("fcfs", alg.fcfs(inst)),
            ("mc-sf", alg.mc_sf(inst)),
            ("sorted-f", alg.sorted_f(inst)),
            ("sorted-f-head", alg.sorted_f(inst, phase2="head")),
            ("sorted-lp", alg.sorted_lp(inst)),
        ):
            ratio.setdefault(name, []).append(score_schedule(inst, seg).total_latency / opt)
    print(f"{count} random instances, n <= 6, o <= 6, s <= 8: ratio to the exact optimum")
    for name, vals in ratio.items():
        v = np.asarray(vals)
        print(
            f"  {name:<14} mean {v.mean():.3f}  max {v.max():.3f}  optimal in {np.mean(v == 1):.0%}"
        )
    for label, vals in lb_ratio.items():
        v = np.asarray(vals)
        print(f"  OPT / LP bound, {label:<15} mean {v.mean():.4f}  max {v.max():.4f}")


def online(n: int, rate: float, memory: int) -> None:
    from servecal.costmodels import AnalyticPredictor
    from servecal.sched.engine import Engine, EngineConfig
    from servecal.sched.policies import make_policy
    from servecal.sched.request import Request
    from servecal.sched.sortedf.online import SortedFOnline
    from servecal.sched.truth import AnalyticTruth

    rng = np.random.default_rng(0)
    inst = short_long(n, 0.8, memory, rng)
    arrive = np.cumsum(rng.exponential(1000.0 / rate, inst.n))
    reqs = [
        Request(i, float(arrive[i]), int(max(1, inst.s[i])), int(inst.o[i])) for i in range(inst.n)
    ]
    print(f"engine, {n} Poisson requests at {rate} req/s, short-long:0.8, M = {memory}")
    for name, policy in (
        ("sorted-f-online", SortedFOnline()),
        ("budget-2048", make_policy("budget-2048")),
        ("full", make_policy("full")),
    ):
        run = Engine(
            reqs,
            policy,
            AnalyticPredictor(),
            AnalyticTruth().executor(np.random.default_rng(1)),
            EngineConfig(kv_capacity=memory),
            policy_name=name,
        ).run()
        df = run.requests
        lat = (df["completion_ms"] - df["arrival_ms"]).mean()
        print(f"  {name:<16} mean latency {lat:8.0f} ms   recomputes {run.recomputes}")


def phase2(n: int, memory: int, seeds: int) -> None:
    """Sorted-F's Phase-2 rules on one Phase-1 list: head-of-line, skipping within the
    current batch (the default), the same with 1 or 2 batches of look-ahead, and
    skipping anywhere in the list; Sorted-LP for reference."""
    print(f"n = {n}, M = {memory}, short-long:0.8: mean latency (steps) by Phase-2 rule")
    for seed in range(seeds):
        inst = short_long(n, 0.8, memory, np.random.default_rng(seed))
        batches = form_batches(inst.s, inst.o, inst.memory, "auto")
        order, group = as_list(batches)
        runs = {
            "head": admit_in_order(inst, order),
            "batch": admit_by_group(inst, order, group),
            "batch+1": admit_by_group(inst, order, group, 1),
            "batch+2": admit_by_group(inst, order, group, 2),
            "list": admit_by_group(inst, order, np.zeros(inst.n, dtype=np.int64)),
        }
        cells = [
            f"{k} {score_schedule(inst, Segments.from_starts(v, inst.o)).mean_latency:8.1f}"
            for k, v in runs.items()
        ]
        lp = score_schedule(inst, alg.sorted_lp(inst)).mean_latency
        print(f"  seed {seed}: " + "  ".join(cells) + f"  | sorted-lp {lp:8.1f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--memory", type=int, default=16384)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--sweep", action="store_true", help="memory and mix sweeps instead")
    ap.add_argument("--gap", action="store_true", help="gap to the LP bound at n <= 200")
    ap.add_argument("--polish", type=int, default=0, help="--gap: also Sorted-F polished")
    ap.add_argument("--gap-memory", type=int, nargs="*", help="--gap: these M only")
    ap.add_argument("--gap-n", type=int, nargs="*", help="--gap: these n only (<= 200)")
    ap.add_argument("--polish-curve", action="store_true", help="polished gap by moves")
    ap.add_argument("--tiny", type=int, default=0, help="instances checked against the optimum")
    ap.add_argument("--online", action="store_true", help="Sorted-F-Online in the engine")
    ap.add_argument("--phase2", action="store_true", help="Sorted-F's Phase-2 rules compared")
    args = ap.parse_args()
    print(_pin_two_cores())
    if args.sweep:
        sweep(args.n, args.seeds)
    elif args.gap:
        memories = tuple(args.gap_memory or (8192, 16384, 65536))
        gap(args.seeds, memories, args.polish, tuple(args.gap_n or (25, 50, 100, 200)))
    elif args.polish_curve:
        polish_curve(args.n, args.memory, args.seeds, (250, 1500, 5000, 20000, 50000, 100000))
    elif args.tiny:
        tiny(args.tiny)
    elif args.online:
        online(300, 20.0, args.memory)
    elif args.phase2:
        phase2(args.n, args.memory, args.seeds)
    else:
        timings(args.n, args.memory, args.seeds)


if __name__ == "__main__":
    main()
