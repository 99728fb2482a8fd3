"""Every scheduler, on random instances: memory never above M, each request done once,
and the Phase-2 / MC-SF admission test agrees with what the simulator then sees."""

from __future__ import annotations

import heapq

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servecal.sched.sortedf import algorithms as alg
from servecal.sched.sortedf.admission import admit_by_group, admit_in_order, future_peak
from servecal.sched.sortedf.amin import run_with_estimates
from servecal.sched.sortedf.model import Instance, Segments, memory_profile, score_schedule

requests = st.lists(st.tuples(st.integers(0, 30), st.integers(1, 25)), min_size=1, max_size=30)


def _instance(reqs, slack: int) -> Instance:
    s, o = (np.array(x) for x in zip(*reqs, strict=True))
    return Instance(s, o, int((s + o).max()) + slack)


def _check(inst: Instance, seg: Segments) -> None:
    res = score_schedule(inst, seg)  # raises on any violation
    assert memory_profile(inst, seg).max() <= inst.memory
    assert np.bincount(seg.rid[seg.done], minlength=inst.n).tolist() == [1] * inst.n
    assert (res.completion >= inst.o).all()


@settings(max_examples=25, deadline=None)
@given(requests, st.integers(0, 120), st.integers(0, 2**31))
def test_all_schedules_are_feasible(reqs, slack, seed) -> None:
    inst = _instance(reqs, slack)
    rng = np.random.default_rng(seed)
    for seg in (
        alg.fcfs(inst),
        alg.fcfs(inst, alpha=0.0),
        alg.mc_sf(inst),
        alg.sorted_f(inst),
        alg.sorted_f(inst, phase2="head"),
        alg.sorted_f(inst, phase2="list"),
        alg.sorted_f(inst, phase2="batch", lookahead=1),
        alg.sorted_f(inst, "swap"),
        alg.sorted_f(inst, "quantile"),
        alg.sorted_lp(inst),
        alg.sorted_f_amin(inst, rng, width=0.8),
    ):
        _check(inst, seg)


@settings(max_examples=25, deadline=None)
@given(requests, st.integers(0, 120))
def test_the_best_phase2_is_the_least_latency_of_the_rules(reqs, slack) -> None:
    inst = _instance(reqs, slack)
    best = score_schedule(inst, alg.sorted_f(inst)).total_latency
    rules = [alg.sorted_f(inst, phase2="batch", lookahead=k) for k in range(4)]
    rules.append(alg.sorted_f(inst, phase2="head"))
    assert best == min(score_schedule(inst, seg).total_latency for seg in rules)


def _stepping_order(inst: Instance, order: np.ndarray) -> np.ndarray:
    """Reference Phase 2: try the head at every boundary, one step at a time."""
    s, o, m = inst.s, inst.o, inst.memory
    starts = np.full(inst.n, -1)
    running: list[tuple[int, int]] = []
    tau, head = 0, 0
    while head < inst.n:
        running = [(i, st_) for i, st_ in running if st_ + o[i] > tau]
        while head < inst.n:
            i = int(order[head])
            held = np.array([s[j] + tau - st_ for j, st_ in running] + [s[i]])
            rem = np.array([o[j] - (tau - st_) for j, st_ in running] + [o[i]])
            if future_peak(held, rem) > m:
                break
            starts[i] = tau
            running.append((i, tau))
            head += 1
        tau += 1
    return starts


@settings(max_examples=60, deadline=None)
@given(requests, st.integers(0, 60), st.randoms(use_true_random=False))
def test_event_driven_admission_equals_stepping(reqs, slack, rnd) -> None:
    inst = _instance(reqs, slack)
    order = np.array(rnd.sample(range(inst.n), inst.n))
    assert admit_in_order(inst, order).tolist() == _stepping_order(inst, order).tolist()


def _stepping_groups(inst: Instance, order: np.ndarray, group: np.ndarray, ahead: int):
    """Reference skipping Phase 2: at every boundary, one step at a time, try the
    waiting entries of the first ``1 + ahead`` groups in list order until none fits."""
    s, o, m = inst.s, inst.o, inst.memory
    starts = np.full(inst.n, -1)
    running: list[tuple[int, int]] = []
    tau = 0
    while (starts < 0).any():
        running = [(i, st_) for i, st_ in running if st_ + o[i] > tau]
        admitted = True
        while admitted:
            admitted = False
            left = [k for k in range(inst.n) if starts[order[k]] < 0]
            groups = sorted({int(group[k]) for k in left})[: ahead + 1]
            for k in left:
                if group[k] not in groups:
                    continue
                i = int(order[k])
                held = np.array([s[j] + tau - st_ for j, st_ in running] + [s[i]])
                rem = np.array([o[j] - (tau - st_) for j, st_ in running] + [o[i]])
                if future_peak(held, rem) <= m:
                    starts[i] = tau
                    running.append((i, tau))
                    admitted = True
                    break
        tau += 1
    return starts


@settings(max_examples=60, deadline=None)
@given(requests, st.integers(0, 60), st.randoms(use_true_random=False), st.integers(0, 2))
def test_skipping_admission_equals_stepping(reqs, slack, rnd, ahead) -> None:
    inst = _instance(reqs, slack)
    order = np.array(rnd.sample(range(inst.n), inst.n))
    group = np.sort(np.array([rnd.randrange(4) for _ in range(inst.n)]))
    got = admit_by_group(inst, order, group, ahead)
    assert got.tolist() == _stepping_groups(inst, order, group, ahead).tolist()
    _check(inst, Segments.from_starts(got, inst.o))


@settings(max_examples=40, deadline=None)
@given(requests, st.integers(0, 60), st.randoms(use_true_random=False))
def test_one_group_per_entry_is_head_of_line(reqs, slack, rnd) -> None:
    inst = _instance(reqs, slack)
    order = np.array(rnd.sample(range(inst.n), inst.n))
    heads = admit_in_order(inst, order)
    assert admit_by_group(inst, order, np.arange(inst.n)).tolist() == heads.tolist()


def test_skipping_starts_a_later_entry_the_head_rule_holds_back() -> None:
    # M = 20, one group [0, 1, 2]. Request 0 (s=12, o=4) holds 13..16. Request 1
    # (s=9) cannot join before 0 ends: at step 4 it would add 9 + (4 - p) >= 10 to
    # 16. Request 2 (s=2, o=2) fits at once (13 + 3, 14 + 4 <= 20).
    inst = Instance([12, 9, 2], [4, 4, 2], memory=20)
    order = np.array([0, 1, 2])
    head = admit_in_order(inst, order)
    skip = admit_by_group(inst, order, np.zeros(3, dtype=int))
    assert head.tolist() == [0, 4, 4]  # request 2 waits behind request 1
    assert skip.tolist() == [0, 4, 0]  # skipping starts it beside request 0
    lat = [
        score_schedule(inst, Segments.from_starts(x, inst.o)).total_latency for x in (skip, head)
    ]
    assert lat == [4 + 8 + 2, 4 + 8 + 6]
    # Separate groups [0, 1], [2]: request 2 must wait for its group's turn.
    assert admit_by_group(inst, order, np.array([0, 0, 1])).tolist() == [0, 4, 4]


def test_sorted_f_rejects_an_unknown_phase2_rule() -> None:
    with pytest.raises(ValueError, match="Phase-2"):
        alg.sorted_f(Instance([1], [1], 4), phase2="greedy")


@settings(max_examples=80, deadline=None)
@given(requests, st.integers(0, 60), st.integers(0, 40))
def test_mcsf_fit_test_matches_simulation(reqs, slack, delay) -> None:
    """Take MC-SF's schedule; starting the last admitted request at any other boundary
    must be feasible exactly when the admission test (future peak) says so."""
    inst = _instance(reqs, slack)
    starts = admit_in_order(inst, alg.mc_sf_order(inst))
    last = int(np.argmax(starts))
    others = np.arange(inst.n) != last
    for p in range(0, int(starts[last]) + delay + 1):
        running = others & (starts < p) & (starts + inst.o > p)
        started_later = others & (starts >= p)
        if started_later.any():
            continue  # the test only speaks about the requests already running
        held = np.append(inst.s[running] + p - starts[running], inst.s[last])
        rem = np.append(inst.o[running] - (p - starts[running]), inst.o[last])
        says_fits = future_peak(held, rem) <= inst.memory
        trial = starts.copy()
        trial[last] = p
        seg = Segments.from_starts(trial, inst.o)
        assert says_fits == bool(memory_profile(inst, seg).max() <= inst.memory), p
        if p == starts[last]:
            assert says_fits


def _stepping_amin(inst: Instance, order: np.ndarray, lower: np.ndarray) -> Segments:
    """Reference Sorted-F+Amin execution, one boundary at a time (no jumps)."""
    s, o, m = inst.s, inst.o, inst.memory
    bound = lower.copy()
    rank = np.empty(inst.n, dtype=int)
    rank[order] = np.arange(inst.n)
    queue = [(int(rank[i]), int(i)) for i in range(inst.n)]
    heapq.heapify(queue)
    run: list[tuple[int, int]] = []
    seg: list[tuple[int, int, int, bool]] = []
    tau = 0
    while queue or run:
        for i, st_ in run:
            if tau - st_ == o[i]:
                seg.append((i, st_, int(o[i]), True))
        run = [(i, st_) for i, st_ in run if tau - st_ != o[i]]
        while queue:
            i = queue[0][1]
            held = [s[j] + tau - st_ for j, st_ in run] + [s[i]]
            rem = [max(bound[j], tau - st_ + 1) - (tau - st_) for j, st_ in run] + [bound[i]]
            if run and future_peak(np.array(held), np.array(rem)) > m:
                break
            heapq.heappop(queue)
            run.append((i, tau))
        while sum(s[j] + tau + 1 - st_ for j, st_ in run) > m:
            i, st_ = run.pop()
            seg.append((i, st_, tau - st_, False))
            bound[i] = max(bound[i], tau - st_ + 1)
            heapq.heappush(queue, (int(rank[i]), i))
        tau += 1
    return Segments.from_lists(*(list(x) for x in zip(*seg, strict=True)))


@settings(max_examples=60, deadline=None)
@given(requests, st.integers(0, 60), st.integers(0, 2**31))
def test_amin_jumps_equal_stepping(reqs, slack, seed) -> None:
    inst = _instance(reqs, slack)
    rng = np.random.default_rng(seed)
    lower = np.maximum(1, (inst.o * rng.uniform(0.2, 1.0, inst.n)).astype(np.int64))
    order = rng.permutation(inst.n)
    a = score_schedule(inst, run_with_estimates(inst, order, lower))
    b = score_schedule(inst, _stepping_amin(inst, order, lower))
    assert a.completion.tolist() == b.completion.tolist()
    assert a.evictions == b.evictions and a.wasted_steps == b.wasted_steps


def test_amin_with_exact_predictions_is_sorted_f() -> None:
    rng = np.random.default_rng(3)
    s = rng.integers(0, 40, 60)
    o = rng.integers(1, 30, 60)
    inst = Instance(s, o, 400)
    amin = score_schedule(inst, alg.sorted_f_amin(inst, np.random.default_rng(0), width=0.0))
    plain = score_schedule(inst, alg.sorted_f(inst, phase2="head"))  # Amin admits head-of-line
    assert amin.evictions == 0
    assert amin.completion.tolist() == plain.completion.tolist()


def test_fcfs_evicts_the_newest_and_restarts_it() -> None:
    # M = 20: both fit at first (5 + 6 = 11 <= 18), then growth overflows at step 6
    # (4+6 + 5+6 = 21 > 20) and request 1, the newest, is evicted with 5 steps done.
    # It fits the watermark again at once (10 + 6 <= 18), is evicted again at step 9
    # (13 + 9 > 20) after 3 more steps, and only runs through after request 0 ends.
    inst = Instance([4, 5], [10, 8], memory=20)
    seg = alg.fcfs(inst, alpha=0.1)
    rows = sorted(
        zip(
            seg.rid.tolist(),
            seg.start.tolist(),
            seg.length.tolist(),
            seg.done.tolist(),
            strict=True,
        )
    )
    assert rows == [(0, 0, 10, True), (1, 0, 5, False), (1, 5, 3, False), (1, 10, 8, True)]
    res = score_schedule(inst, seg)
    assert res.completion.tolist() == [10, 18] and res.evictions == 2 and res.wasted_steps == 8


def test_fcfs_keeps_arrival_order_at_the_watermark() -> None:
    # Watermark 0.9·20 = 18: request 1 (s=15) does not fit beside request 0, and
    # request 2 (small) must wait behind it: FCFS does not skip ahead.
    inst = Instance([3, 15, 1], [4, 2, 1], memory=20)
    starts = {
        int(r): int(t) for r, t in zip(*(lambda g: (g.rid, g.start))(alg.fcfs(inst)), strict=True)
    }
    assert starts == {0: 0, 1: 4, 2: 4}
