"""Sorted-F Phase 1: the exact DP against brute force, heuristics feasible and no better."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from servecal.sched.sortedf.batching import (
    choose_solver,
    dp_best_batch,
    f_value,
    form_batches,
    is_feasible,
    quantile_best_batch,
    swap_best_batch,
)

small = st.lists(st.tuples(st.integers(0, 12), st.integers(1, 10)), min_size=1, max_size=9)


def _brute_min_f(s: np.ndarray, o: np.ndarray, memory: int) -> float:
    best = float("inf")
    for r in range(1, len(o) + 1):
        for c in itertools.combinations(range(len(o)), r):
            idx = list(c)
            if is_feasible(s[idx], o[idx], memory):
                best = min(best, f_value(o[idx]))
    return best


@settings(max_examples=60, deadline=None)
@given(small, st.integers(0, 40))
def test_dp_is_exact(reqs, slack) -> None:
    s, o = (np.array(x) for x in zip(*reqs, strict=True))
    memory = int((s + o).max()) + slack
    got = dp_best_batch(s, o, memory)
    assert is_feasible(s[got], o[got], memory)
    assert len(set(got.tolist())) == len(got)
    assert abs(f_value(o[got]) - _brute_min_f(s, o, memory)) < 1e-12


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 30)), min_size=1, max_size=40),
    st.integers(0, 200),
)
def test_heuristics_are_feasible_and_never_beat_the_dp(reqs, slack) -> None:
    s, o = (np.array(x) for x in zip(*reqs, strict=True))
    memory = int((s + o).max()) + slack
    exact = f_value(o[dp_best_batch(s, o, memory)])
    for pick in (swap_best_batch(s, o, memory), quantile_best_batch(s, o, memory)):
        assert pick.size >= 1 and is_feasible(s[pick], o[pick], memory)
        assert f_value(o[pick]) >= exact - 1e-12


def test_swap_search_improves_on_its_start() -> None:
    rng = np.random.default_rng(11)
    worse = 0
    for _ in range(30):
        s = rng.integers(0, 60, 40)
        o = rng.integers(1, 40, 40)
        memory = 300
        q = f_value(o[quantile_best_batch(s, o, memory)])
        w = f_value(o[swap_best_batch(s, o, memory)])
        assert w <= q + 1e-12
        worse += w < q - 1e-12
    assert worse >= 1  # the local search does something on some instances


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 30)), min_size=1, max_size=40),
    st.integers(0, 200),
    st.sampled_from(["dp", "swap", "quantile"]),
)
def test_batches_partition_the_requests(reqs, slack, solver) -> None:
    s, o = (np.array(x) for x in zip(*reqs, strict=True))
    memory = int((s + o).max()) + slack
    batches = form_batches(s, o, memory, solver)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(len(o)))
    for b in batches:
        assert is_feasible(s[b], o[b], memory)
        assert (np.diff(o[b]) >= 0).all()


def test_solver_by_size() -> None:
    assert [choose_solver(n) for n in (8, 100, 101, 500, 501, 2000)] == [
        "dp",
        "dp",
        "swap",
        "swap",
        "quantile",
        "quantile",
    ]


def test_f_prefers_many_short_requests() -> None:
    # Three short requests fit together (peak 3·(1+2) = 9 <= 10): F = 6/9 < any pair or single.
    s = np.array([1, 1, 1, 1])
    o = np.array([2, 2, 2, 9])
    got = dp_best_batch(s, o, 10)
    assert sorted(got.tolist()) == [0, 1, 2]
