"""The replica-count search and the frontier, on made-up monotone fleets (no simulation)."""

from __future__ import annotations

import pytest

from servecal.sched.cluster.planner import ReplicaSearch


def _search(needed: int, lo: int = 1, hi: int = 16, cap: int = 16, guess: int | None = None):
    s = ReplicaSearch(lo, hi)
    seen = []
    while (n := s.next_count(cap, guess)) is not None:
        assert lo <= n <= min(hi, cap) and n not in seen
        seen.append(n)
        s.record(n, n >= needed)
    return s, seen


@pytest.mark.parametrize("needed", range(1, 18))
def test_the_search_finds_the_fewest_replicas_or_says_none_fit(needed):
    s, seen = _search(needed)
    if needed <= 16:
        assert s.done and s.passed == needed
        assert len(seen) <= 8
    else:
        assert not s.done and s.passed is None and seen[-1] == 16


@pytest.mark.parametrize("needed", [3, 7, 12])
def test_a_right_guess_costs_two_simulations(needed):
    s, seen = _search(needed, guess=needed)
    assert s.passed == needed and seen == [needed, needed - 1]


def test_the_cost_bound_stops_a_search_that_cannot_win():
    s, seen = _search(9, cap=5)
    assert s.passed is None and seen == [5]  # one simulation, at the bound
    s, seen = _search(4, cap=5)  # it can win: bisect below the bound
    assert s.passed == 4 and seen[0] == 5 and len(seen) <= 4
    s, seen = _search(9, cap=5, guess=2)  # a sibling's count first, then the bound
    assert s.passed is None and seen == [2, 5]
    bounded = ReplicaSearch(1, 16)
    bounded.record(8, True)  # it meets the target at 8 ...
    assert bounded.next_count(cap=6) is None  # ... but 8 costs more than the best fleet
    assert ReplicaSearch(1, 16).next_count(cap=0) is None  # dearer than the best at 1
