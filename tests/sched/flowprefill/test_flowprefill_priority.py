"""The priority rule sign(slack)/d and SLO-aware batching on hand-built cases."""

from __future__ import annotations

import numpy as np
import pytest
from flowkit import EXACT, driver, req

from servecal.sched.flowprefill import (
    Decision,
    FlowPrefill,
    Job,
    by_priority,
    priority,
    priority_order,
    slack_ms,
)


def test_slack_and_priority_by_the_formula():
    assert slack_ms(300.0, 100.0, 50.0) == 150.0
    assert slack_ms(300.0, 100.0, -5.0) == 200.0  # negative estimates count as 0
    assert priority(300.0, 150.0) == pytest.approx(1 / 300)
    assert priority(300.0, -1.0) == pytest.approx(-1 / 300)
    assert priority(300.0, 0.0) == 0.0
    with pytest.raises(ValueError):
        priority(0.0, 1.0)


def _jobs(*specs):
    """(rid, arrival, ttft slo) → jobs; remaining time comes from a dict in the test."""
    return [Job(req(rid, at, 100, slo)) for rid, at, slo in specs]


def test_positive_slack_in_deadline_order_then_late_ones_latest_deadline_first():
    # deadlines: 0 → 1000, 1 → 400, 2 → 300 (late: needs 500), 3 → 250 (late), 4 → 600
    jobs = _jobs((0, 0, 1000), (1, 0, 400), (2, 0, 300), (3, 50, 200), (4, 100, 500))
    remaining = {0: 10.0, 1: 10.0, 2: 500.0, 3: 400.0, 4: 10.0}
    order = [j.rid for j in by_priority(jobs, 0.0, lambda j: remaining[j.rid])]
    assert order == [1, 4, 0, 2, 3]


def test_ties_go_to_the_earlier_arrival_then_the_lower_id():
    jobs = _jobs((5, 10, 290), (3, 0, 300), (4, 0, 300))  # all deadlines 300
    order = [j.rid for j in by_priority(jobs, 0.0, lambda j: 1.0)]
    assert order == [3, 4, 5]


def test_slack_turns_negative_as_time_passes():
    jobs = _jobs((0, 0, 300), (1, 0, 1000))
    assert [j.rid for j in by_priority(jobs, 0.0, lambda j: 100.0)] == [0, 1]
    # at 250 ms request 0 cannot make it any more: the savable one goes first
    assert [j.rid for j in by_priority(jobs, 250.0, lambda j: 100.0)] == [1, 0]


def test_top_request_preempts_and_late_ones_do_not():
    # request 1 arrives urgent and savable; request 2 arrives already lost
    reqs = [req(0, 0.0, 4000, 10_000.0), req(1, 5.0, 200, 100.0), req(2, 6.0, 6000, 1.0)]
    flow = driver(reqs, FlowPrefill()).run()
    first = flow.requests.set_index("rid")["first_token_ms"]
    assert first[1] < first[0] < first[2]  # the lost one runs last
    assert flow.counters["parked_batches"] == 1


def test_short_requests_are_batched_while_the_top_keeps_ten_percent_slack():
    # three short requests wait behind a long one; all fit in one 2048-token batch
    reqs = [req(0, 0.0, 3000, 10_000.0)] + [req(i, 1.0, 500, 1000.0) for i in (1, 2, 3)]
    flow = driver(reqs, FlowPrefill()).run()
    it = flow.iterations
    assert "1 2 3" in set(it["rids"])  # one batch of the three
    first = flow.requests.set_index("rid")["first_token_ms"]
    assert first[1] == first[2] == first[3]


def test_batching_stops_when_the_top_would_lose_its_slack():
    # the top (500 tokens, SLO 12 ms, arrives at 1 ms) must keep 1.2 ms of slack; each
    # 450-token member adds 2.7 ms to the batch: two fit, the third does not
    top_slo = 12.0
    reqs = [req(0, 0.0, 3000, 10_000.0), req(1, 1.0, 500, top_slo)] + [
        req(i, 1.0, 450, 1000.0) for i in (2, 3, 4)
    ]
    flow = driver(reqs, FlowPrefill()).run()
    it = flow.iterations
    batch = next(r for r in it["rids"] if r.startswith("1"))
    members = [int(x) for x in batch.split()]
    spare = (1.0 + top_slo) - (0.1 * top_slo)
    # the batch started at the park boundary; its predicted time fits the spare slack
    start = float(it.loc[it["rids"] == batch, "start_ms"].iloc[0])
    tokens = 500 + 450 * (len(members) - 1)
    assert EXACT.predict(0, tokens) <= spare - start
    assert EXACT.predict(0, tokens + 450) > spare - start  # one more would not have fitted
    assert len(members) == 3


def test_nobatch_ablation_runs_one_request_at_a_time():
    reqs = [req(0, 0.0, 3000, 10_000.0)] + [req(i, 1.0, 500, 1000.0) for i in (1, 2, 3)]
    flow = driver(reqs, FlowPrefill(batching=False)).run()
    assert (flow.iterations["n_prefills"] == 1).all()


def test_decision_names_the_top_first():
    assert Decision(((4, 10), (2, 5))).top == 4
    assert Decision().top is None


def test_vectorised_order_equals_the_rule_on_random_queues():
    rng = np.random.default_rng(11)
    for _ in range(20):
        n = int(rng.integers(2, 60))
        jobs = _jobs(*[(i, float(rng.integers(0, 50)), float(rng.choice([250, 500, 4000])))
                       for i in range(n)])  # fmt: skip
        rem = {j.rid: float(rng.choice([0.0, 10.0, 300.0, 5000.0])) for j in jobs}
        now = float(rng.uniform(0, 400))
        fast = priority_order(jobs, now, lambda j, r=rem: r[j.rid])
        slow = by_priority(jobs, now, lambda j, r=rem: r[j.rid])
        assert [j.rid for j in fast] == [j.rid for j in slow]
