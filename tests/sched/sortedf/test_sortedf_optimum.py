"""Exact search, the LP lower bound, and Sorted-F's ratio to the optimum."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from servecal.sched.sortedf import algorithms as alg
from servecal.sched.sortedf.exact import exact_optimum
from servecal.sched.sortedf.generate import random_tiny
from servecal.sched.sortedf.lp import breakpoints, lp_relaxation
from servecal.sched.sortedf.model import InfeasibleSchedule, Instance, Segments, simulate


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
            best = simulate(inst, Segments.from_starts(np.asarray(starts), inst.o)).total_latency
        except InfeasibleSchedule:
            continue
    return best


def test_exact_matches_brute_force_on_very_small_instances() -> None:
    rng = np.random.default_rng(7)
    for _ in range(25):
        inst = random_tiny(rng, n_max=3, o_max=3, s_max=4)
        total, starts = exact_optimum(inst)
        assert total == _brute_optimum(inst)
        assert simulate(inst, Segments.from_starts(starts, inst.o)).total_latency == total


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
        worst_lb = max(worst_lb, opt / lb)
        for seg in (alg.fcfs(inst), alg.mc_sf(inst), alg.sorted_f(inst), alg.sorted_lp(inst)):
            assert simulate(inst, seg).total_latency >= opt
    assert worst_lb >= 1.0


def test_sorted_f_ratio_to_optimum_on_1000_tiny_instances() -> None:
    rng = np.random.default_rng(48)
    ratios = []
    for _ in range(1000):
        inst = random_tiny(rng, n_max=5, o_max=5, s_max=8)
        opt, _ = exact_optimum(inst)
        ratios.append(simulate(inst, alg.sorted_f(inst)).total_latency / opt)
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
    assert lp.total <= simulate(inst, alg.sorted_f(inst)).total_latency
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
        # Memory binds hard: the ≤ 1.10 target is NOT met with this LP (measured
        # 1.11-1.16, docs/sortedf.md §5); this guards against regressions only.
        (30, 16384, 1.20),
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
