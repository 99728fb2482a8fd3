"""Event-driven vs per-iteration scheduling: same schedule, far fewer wake-ups."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from flowkit import driver, random_requests, req

from servecal.sched.flowprefill import FlowPrefill
from servecal.sched.truth import AnalyticTruth

NOISY = AnalyticTruth(sigma=0.1)


def _both(requests, setting="prefill"):
    runs = {}
    for mode in ("event", "iteration"):
        d = driver(requests, FlowPrefill(), setting=setting, mode=mode, truth=NOISY, seed=3)
        runs[mode] = d.run()
    return runs["event"], runs["iteration"]


def _same(a, b):
    pd.testing.assert_frame_equal(a.requests, b.requests)
    keep = [c for c in a.iterations.columns if c != "decision_us"]
    pd.testing.assert_frame_equal(
        a.iterations[keep].reset_index(drop=True),
        b.iterations[keep].reset_index(drop=True),
    )


def _sparse(n):
    # each prefill (< 40 ms) ends long before the next arrival: nothing to preempt
    rng = np.random.default_rng(1)
    return [req(i, 100.0 * i, int(rng.integers(100, 6000)), 300.0, out=20) for i in range(n)]


def _one_class_queue(n):
    # a busy queue of one SLO class: arrival order is deadline order, the top never changes
    rng = np.random.default_rng(2)
    t = np.cumsum(rng.exponential(8.0, n))
    return [req(i, float(t[i]), int(rng.integers(500, 3000)), 1e6) for i in range(n)]


@pytest.mark.parametrize("setting", ["prefill", "colocated"])
def test_identical_results_without_preemption_opportunities(setting):
    for requests in (_sparse(40), _one_class_queue(60)):
        event, iteration = _both(requests, setting)
        assert event.counters["parked_batches"] == iteration.counters["parked_batches"] == 0
        _same(event, iteration)
        # >= 80% fewer wake-ups
        assert event.counters["wakeups"] <= 0.2 * iteration.counters["wakeups"]


def test_wakeups_are_events_only():
    requests = _sparse(30)
    event, _ = _both(requests)
    # one wake-up per arrival and one per completion: no polling in between
    assert event.counters["wakeups"] == 2 * len(requests)


def test_with_preemptions_both_modes_serve_everyone_and_block_at_most_one_operator():
    requests = random_requests(np.random.default_rng(5), 120, rate=90.0)
    event, iteration = _both(requests)
    assert event.counters["parked_batches"] > 0
    assert event.counters["wakeups"] <= 0.2 * iteration.counters["wakeups"]
    for run in (event, iteration):
        assert run.requests["first_token_ms"].notna().all()
        assert run.counters["max_blocking_ms"] <= run.counters["max_operator_ms"]
    # per-iteration decides at the boundary itself: it never waits inside an operator
    assert iteration.counters["max_blocking_ms"] == 0.0
