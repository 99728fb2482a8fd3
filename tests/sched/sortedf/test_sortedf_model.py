"""The simulator: memory per step, and every way a schedule can break the model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servecal.sched.sortedf.model import (
    InfeasibleSchedule,
    Instance,
    Segments,
    batch_peak,
    memory_profile,
    score_schedule,
)


def _brute_profile(inst: Instance, seg: Segments) -> np.ndarray:
    horizon = int((seg.start + seg.length).max())
    use = np.zeros(horizon, dtype=np.int64)
    for r, st_, ln in zip(seg.rid, seg.start, seg.length, strict=True):
        for j in range(1, ln + 1):
            use[st_ + j - 1] += inst.s[r] + j
    return use


def test_step_semantics_by_hand() -> None:
    # Request 0 (s=2, o=3) starts at 0: holds 3, 4, 5 in steps 1-3, completes at 3.
    # Request 1 (s=1, o=2) starts at 1: holds 2, 3 in steps 2-3, completes at 3.
    inst = Instance([2, 1], [3, 2], memory=8)
    seg = Segments.from_starts(np.array([0, 1]), inst.o)
    assert memory_profile(inst, seg).tolist() == [3, 6, 8]
    res = score_schedule(inst, seg)
    assert res.completion.tolist() == [3, 3]
    assert res.total_latency == 6 and res.peak_memory == 8 and res.makespan == 3


def test_over_memory_is_rejected() -> None:
    inst = Instance([2, 1], [3, 2], memory=7)
    with pytest.raises(InfeasibleSchedule, match="memory 8 > M = 7 at step 3"):
        score_schedule(inst, Segments.from_starts(np.array([0, 1]), inst.o))


@pytest.mark.parametrize(
    ("rid", "start", "length", "done", "message"),
    [
        ([0], [0], [3], [True], "request 1 completes 0 times"),
        ([0, 0, 1], [0, 3, 0], [3, 3, 2], [True, True, True], "completes 2 times"),
        ([0, 1], [0, 0], [2, 2], [True, True], "exactly o_i"),
        ([0, 0, 1], [0, 1, 0], [2, 3, 2], [False, True, True], "overlap"),
        ([0, 0, 1], [0, 4, 0], [3, 1, 2], [True, False, True], "after it completed"),
        ([0, 0, 1], [0, 5, 0], [3, 3, 2], [False, True, True], "aborted segment ran"),
    ],
)
def test_broken_schedules_are_rejected(rid, start, length, done, message) -> None:
    inst = Instance([1, 1], [3, 2], memory=100)
    with pytest.raises(InfeasibleSchedule, match=message):
        score_schedule(inst, Segments.from_lists(rid, start, length, done))


def test_evicted_run_costs_memory_and_counts() -> None:
    inst = Instance([4, 1], [3, 2], memory=100)
    seg = Segments.from_lists([0, 0, 1], [0, 2, 0], [2, 3, 2], [False, True, True])
    res = score_schedule(inst, seg)
    assert res.evictions == 1 and res.wasted_steps == 2
    assert res.completion.tolist() == [5, 2]
    assert memory_profile(inst, seg).tolist() == [5 + 2, 6 + 3, 5, 6, 7]


def test_instance_rejects_requests_that_never_fit() -> None:
    with pytest.raises(ValueError, match="can never run"):
        Instance([5], [6], memory=10)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(1, 5), st.integers(0, 8)), min_size=1, max_size=6
    )
)
def test_profile_matches_brute_force(reqs) -> None:
    s, o, starts = (np.array(x) for x in zip(*reqs, strict=True))
    inst = Instance(s, o, memory=10_000)
    seg = Segments.from_starts(starts, o)
    assert memory_profile(inst, seg).tolist() == _brute_profile(inst, seg).tolist()
    # batch_peak is the profile's peak when all start together.
    together = Segments.from_starts(np.zeros_like(starts), o)
    assert batch_peak(s, o) == int(_brute_profile(inst, together).max())
