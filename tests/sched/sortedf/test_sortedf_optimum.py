"""Exact search, the LP lower bound, and Sorted-F's ratio to the optimum."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servecal.sched.sortedf import algorithms as alg
from servecal.sched.sortedf.exact import exact_optimum
from servecal.sched.sortedf.generate import random_tiny
from servecal.sched.sortedf.lp import DFFS, breakpoints, build_lp, lp_relaxation
from servecal.sched.sortedf.model import InfeasibleSchedule, Instance, Segments, score_schedule


def _brute_optimum(inst: Instance) -> int:
    """Every vector of start times up to the sequential schedule's total latency."""
    seq = int(np.cumsum(inst.o).sum())
    best = seq
    ranges = [range(0, seq - int(o) + 1) for o in inst.o]
    for starts in itertools.product(*ranges):
        c = np.asarray(starts) + inst.o
        if c.sum() >= best:
            continue
        try:
            best = score_schedule(
                inst, Segments.from_starts(np.asarray(starts), inst.o)
            ).total_latency
        except InfeasibleSchedule:
            continue
    return best


def test_exact_matches_brute_force_on_very_small_instances() -> None:
    rng = np.random.default_rng(7)
    for _ in range(25):
        inst = random_tiny(rng, n_max=3, o_max=3, s_max=4)
        total, starts = exact_optimum(inst)
        assert total == _brute_optimum(inst)
        assert score_schedule(inst, Segments.from_starts(starts, inst.o)).total_latency == total


def test_exact_finds_starts_between_completions() -> None:
    # Request 0 holds 5, 6, 7 in steps 1-3. Request 1 started at 1 would hold 5 in
    # step 3 (7 + 5 > 11); started at 2 it holds 4 there (7 + 4 = 11) and completes at
    # 6: total 9. Waiting for the completion at 3 gives 10, so a search over
    # completion times alone would miss the optimum.
    inst = Instance([4, 3], [3, 4], memory=11)
    total, starts = exact_optimum(inst)
    assert (total, starts.tolist()) == (9, [0, 2])
    assert _brute_optimum(inst) == 9


def test_exact_optimum_and_lp_bound_bracket_every_algorithm() -> None:
    rng = np.random.default_rng(2026)
    worst_lb = 0.0
    for _ in range(60):
        inst = random_tiny(rng, n_max=7, o_max=6, s_max=8)
        opt, _ = exact_optimum(inst)
        lb = lp_relaxation(inst, horizon=alg.default_horizon(inst)).total
        assert lb <= opt + 1e-6
        # The large-n setting (geometric intervals, area rows, no early shares).
        coarse = lp_relaxation(
            inst, alg.default_horizon(inst), unit=2, eps=0.5, families=("area",), early=False
        )
        assert coarse.total <= opt + 1e-6
        worst_lb = max(worst_lb, opt / lb)
        for seg in (alg.fcfs(inst), alg.mc_sf(inst), alg.sorted_f(inst), alg.sorted_lp(inst)):
            assert score_schedule(inst, seg).total_latency >= opt
    assert worst_lb >= 1.0


def test_sorted_f_ratio_to_optimum_on_1000_tiny_instances() -> None:
    rng = np.random.default_rng(48)
    ratios = []
    for _ in range(1000):
        inst = random_tiny(rng, n_max=5, o_max=5, s_max=8)
        opt, _ = exact_optimum(inst)
        ratios.append(score_schedule(inst, alg.sorted_f(inst)).total_latency / opt)
    assert min(ratios) >= 1.0
    assert max(ratios) <= 48.0  # the proven bound; docs/sortedf.md reports the max seen


def test_exact_refuses_large_instances() -> None:
    with pytest.raises(ValueError, match="n <= 8"):
        exact_optimum(Instance(np.ones(9, dtype=int), np.ones(9, dtype=int), 100))


def test_lp_bound_is_at_least_the_trivial_bound() -> None:
    rng = np.random.default_rng(5)
    s = rng.integers(1, 50, 40)
    o = rng.integers(1, 30, 40)
    inst = Instance(s, o, 300)
    lp = lp_relaxation(inst, horizon=alg.default_horizon(inst))
    assert lp.total >= o.sum() - 1e-6
    assert lp.total <= score_schedule(inst, alg.sorted_f(inst)).total_latency
    order = np.argsort(lp.expected_completion)
    assert sorted(order.tolist()) == list(range(40))


def test_breakpoints_cover_the_horizon() -> None:
    pts = breakpoints(1000, unit=8, eps=0.1)
    assert pts[:8].tolist() == list(range(1, 9))
    assert pts[-1] == 1000 and (np.diff(pts) > 0).all()


@pytest.mark.parametrize(
    ("n", "memory", "limit"),
    [
        # Memory binds lightly: the seed's 1.03-1.09 range holds (measured 1.00-1.02).
        (40, 65536, 1.10),
        # Memory binds (about 6 long prompts fit): measured 1.06-1.09. With 2-3 long
        # prompts (M = 8192) the default is not within 1.10; polished it is (below).
        (30, 16384, 1.10),
    ],
)
def test_gap_to_lp_bound_on_tractable_instances(n: int, memory: int, limit: float) -> None:
    from servecal.sched.sortedf.generate import short_long
    from servecal.sched.sortedf.runner import OfflineConfig, run_instance

    cfg = OfflineConfig(algos=("sorted-f",), lp_bound=True)
    for seed in range(3):
        inst = short_long(n, 0.8, memory, np.random.default_rng(seed))
        gap = run_instance(inst, cfg, np.random.default_rng(seed)).gap()
        assert gap is not None and 1.0 - 1e-9 <= gap <= limit


def test_polished_sorted_f_meets_the_gap_where_the_default_does_not() -> None:
    # M = 8,192: two or three long prompts fill the cache and the default Sorted-F
    # ends 1.07-1.14 above the bound at n = 25; 2000 polish moves (seeded as in
    # benchmarks/sortedf.py --gap) bring every instance within 1.10 (measured
    # 1.071, 1.069, 1.092).
    from servecal.sched.sortedf.generate import short_long

    for seed in range(3):
        inst = short_long(25, 0.8, 8192, np.random.default_rng(seed))
        bound = lp_relaxation(inst, horizon=alg.default_horizon(inst)).mean
        plain = score_schedule(inst, alg.sorted_f(inst)).mean_latency
        polished = score_schedule(
            inst, alg.sorted_f(inst, polish_moves=2000, seed=seed)
        ).mean_latency
        assert bound <= polished <= plain
        assert polished / bound <= 1.10


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 500), st.lists(st.integers(1, 500), min_size=1, max_size=12))
def test_row_families_are_dual_feasible(memory, sizes) -> None:
    """Whatever fits in one step (Σ v <= M) has Σ f(v / M) <= 1, for every family."""
    v = np.asarray(sizes, dtype=np.int64)
    v = v[np.cumsum(v) <= memory]  # a set that fits
    for name, f in DFFS.items():
        w = f(v, memory)
        assert (w >= 0).all() and (w <= 1).all(), name
        assert w.sum() <= 1 + 1e-12, (name, v.tolist(), memory)
    x = np.arange(1, memory + 1)
    for name, f in DFFS.items():  # non-decreasing in v
        assert (np.diff(f(x, memory)) >= -1e-12).all(), name


@pytest.mark.parametrize(
    "knobs", [{}, {"unit": 2, "eps": 0.5}, {"partial": 1}, {"early": False, "unit": 3}]
)
def test_every_row_holds_at_optimal_and_heuristic_schedules(knobs) -> None:
    """Put z at the exact optimum's completions (and at each algorithm's): every row of
    every family holds and the objective is at most the schedule's total latency."""
    rng = np.random.default_rng(61)
    families = tuple(DFFS)
    for _ in range(40):
        inst = random_tiny(rng, n_max=6, o_max=6, s_max=9)
        lp = build_lp(inst, alg.default_horizon(inst), families=families, **knobs)
        opt, starts = exact_optimum(inst)
        schedules = [Segments.from_starts(starts, inst.o), alg.mc_sf(inst), alg.sorted_f(inst)]
        for seg in schedules:
            res = score_schedule(inst, seg)
            z = lp.indicator(res.completion)
            assert (lp.a_ub @ z <= lp.b_ub + 1e-9).all()
            assert (z <= lp.upper).all()
            assert lp.c @ z + lp.const <= res.total_latency + 1e-9
        assert score_schedule(inst, schedules[0]).total_latency == opt


def test_dual_feasible_rows_tighten_the_bound_with_big_prompts() -> None:
    # Four requests of 51 tokens + 2 steps, M = 100: no two ever run together
    # (52 + 52 > 100), so the optimum is sequential, 2 + 4 + 6 + 8 = 20. Memory area
    # alone sees 4 × 105 token-steps in 100 per step and allows about 12.6; the
    # "more than half" family u1 counts each as a whole step and closes the gap.
    inst = Instance([51] * 4, [2] * 4, memory=100)
    horizon = alg.default_horizon(inst)
    assert exact_optimum(inst)[0] == 20
    area = lp_relaxation(inst, horizon, families=("area",)).total
    with_u1 = lp_relaxation(inst, horizon, families=("area", "u1")).total
    assert area < 13.0 and with_u1 == pytest.approx(20.0)
    # Three of 40 tokens (+3 steps) exceed M = 100 only as a triple: u2 ("more than
    # a third" counts 1/2) lifts the bound to the optimum, 18, where u1 cannot.
    inst = Instance([40, 40, 40, 10], [3, 3, 3, 6], memory=100)
    horizon = alg.default_horizon(inst)
    assert exact_optimum(inst)[0] == 18
    u1 = lp_relaxation(inst, horizon, families=("area", "u1")).total
    u12 = lp_relaxation(inst, horizon, families=("area", "u1", "u2")).total
    assert u1 < 17.7 and u12 == pytest.approx(18.0)
    assert lp_relaxation(inst, horizon).total == pytest.approx(18.0)  # the default has u2


def test_build_lp_rejects_unknown_families() -> None:
    with pytest.raises(ValueError, match="row families"):
        build_lp(Instance([1], [1], 4), 1, families=("area", "knapsack"))
