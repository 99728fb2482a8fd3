"""Engine: timing of tokens, memory bound, recompute preemption, lazy bookkeeping."""

from __future__ import annotations

import math

import numpy as np
import pytest
from enginekit import engine, random_requests, req

from servecal.costmodels import AnalyticPredictor
from servecal.sched.live import Phase
from servecal.sched.plan import DECODE_ONLY, Plan
from servecal.sched.policies import FixedChunk, FullPrefill, SLOWeave, TokenBudget

T = AnalyticPredictor()


def test_one_request_timeline_matches_the_formula():
    # prompt 300 in chunks of 128, 128, 44; then 4 more tokens, one per decode iteration
    run = engine([req(0, at=5.0, prompt=300, out=5)], FixedChunk(128)).run()
    it = run.iterations
    assert list(it["chunk"]) == [128, 128, 44, 0, 0, 0, 0]
    assert list(it["n_decode"]) == [0, 0, 0, 1, 1, 1, 1]
    assert list(it["prefix"]) == [0, 128, 256, 0, 0, 0, 0]
    expected = [T.predict(0, 128)] * 2 + [T.predict(0, 44)] + [T.predict(1, 0)] * 4
    np.testing.assert_allclose(it["duration_ms"], expected)
    row = run.requests.iloc[0]
    assert row.first_token_ms == pytest.approx(5.0 + sum(expected[:3]))
    assert row.completion_ms == pytest.approx(5.0 + sum(expected))
    assert row.tokens_out == 5
    assert row.tpot_max_ms == pytest.approx(T.predict(1, 0))
    assert row.tpot_p99_ms == pytest.approx(T.predict(1, 0))
    # logged predictions: the oracle is exact
    np.testing.assert_allclose(it["pred_p50_ms"], it["duration_ms"])


def test_ctx_is_the_mean_kv_of_the_decodes():
    reqs = [req(0, prompt=100, out=3), req(1, prompt=300, out=3)]
    it = engine(reqs, FullPrefill()).run().iterations
    # 0: prefill r0; 1: r0 decodes (KV 100) + prefill r1; 2: r0 (KV 101) and r1 (KV 300)
    # decode, r0 finishes; 3: r1 decodes its last token (KV 301)
    assert list(it["n_decode"]) == [0, 1, 2, 1]
    assert list(it["ctx"]) == [0.0, 100.0, 200.5, 301.0]


def test_single_token_request_finishes_at_its_prefill():
    run = engine([req(0, prompt=50, out=1)], FullPrefill()).run()
    row = run.requests.iloc[0]
    assert row.first_token_ms == row.completion_ms
    assert math.isnan(row.tpot_p99_ms)
    assert len(run.iterations) == 1


def test_idle_gap_waits_for_the_next_arrival():
    reqs = [req(0, at=0.0, prompt=10, out=1), req(1, at=1000.0, prompt=10, out=1)]
    it = engine(reqs, FullPrefill()).run().iterations
    assert list(it["start_ms"]) == [0.0, 1000.0]


@pytest.mark.parametrize("policy", [FixedChunk(2048), TokenBudget(4096), FullPrefill(), SLOWeave()])
def test_memory_never_exceeds_capacity_and_preemption_loses_no_request(policy):
    rng = np.random.default_rng(3)
    reqs = random_requests(rng, 150, rate=200.0)
    kv = 12_000
    eng = engine(reqs, policy, kv=kv)
    while eng.step():
        assert eng.view.kv_used <= kv
        assert sum(r.kv_tokens for r in eng.view.running) == eng.view.kv_used
    run = eng.result()
    assert eng.state.recomputes > 0  # memory binds: the recompute path ran
    q = run.requests
    assert (q.tokens_out == q.output_tokens).all()
    assert q.completion_ms.notna().all()
    assert q.recomputes.sum() == eng.state.recomputes


def test_too_large_request_is_rejected_not_stuck():
    reqs = [req(0, prompt=900, out=200), req(1, prompt=100, out=5)]
    run = engine(reqs, FullPrefill(), kv=1000).run()
    q = run.requests.set_index("rid")
    assert q.loc[0, "rejected"] and math.isnan(q.loc[0, "completion_ms"])
    assert q.loc[1, "tokens_out"] == 5


class _Alternating:
    """Decodes only even or odd ids on alternate iterations: exercises the slow path."""

    def __init__(self) -> None:
        self.k = 0

    def plan(self, view, predictor):
        self.k += 1
        live = view.next_prefill()
        prefill = ((live.rid, live.remaining_prefill),) if live is not None else ()
        ready = [r.rid for r in view.ready if r.rid % 2 == self.k % 2]
        if not ready and not prefill:  # never idle while requests are ready
            ready = [r.rid for r in view.ready]
        return Plan(decode=tuple(ready), prefill=prefill)


def test_subset_decodes_keep_exact_token_counts_and_gaps():
    rng = np.random.default_rng(5)
    reqs = random_requests(rng, 40, rate=100.0)
    eng = engine(reqs, _Alternating())
    times: dict[int, list[float]] = {r.rid: [] for r in reqs}
    counts: dict[int, int] = {}
    while True:
        counts = {r.rid: r.tokens_out for r in eng.state.live.values()}
        if not eng.step():
            break
        now = eng.view.now_ms
        for rid, live in eng.state.live.items():
            if live.tokens_out > counts.get(rid, 0):
                assert live.tokens_out == counts.get(rid, 0) + 1
                times[rid].append(now)
    run = eng.result().requests.set_index("rid")
    for r in reqs:
        gaps = np.diff(times[r.rid])
        assert run.loc[r.rid, "tokens_out"] == r.output_tokens == len(times[r.rid])
        if gaps.size:
            assert run.loc[r.rid, "tpot_max_ms"] == pytest.approx(gaps.max())
            assert run.loc[r.rid, "tpot_p99_ms"] == pytest.approx(np.percentile(gaps, 99))
            assert run.loc[r.rid, "tpot_mean_ms"] == pytest.approx(gaps.mean())


def test_earliest_deadline_tracks_last_tokens_and_per_request_slos():
    reqs = [req(0, prompt=10, out=50, tpot=50.0), req(1, prompt=10, out=50, tpot=10.0)]
    eng = engine(reqs, FullPrefill())
    for _ in range(6):
        eng.step()
        view = eng.view
        brute = min((r.last_token_ms + r.tpot_slo_ms for r in view.ready), default=math.inf)
        assert view.earliest_deadline_ms() == pytest.approx(brute)
    assert eng.view.earliest_deadline_ms() == pytest.approx(eng.view.now_ms + 10.0)


def test_parked_request_keeps_kv_and_progress():
    class ParkFirst:
        def __init__(self):
            self.k = 0

        def plan(self, view, predictor):
            self.k += 1
            if self.k == 1:
                return Plan(prefill=((0, 50),))
            if self.k == 2:
                return Plan(park=(0,), prefill=((1, 10),))
            live = view.next_prefill()
            if live is None:
                return DECODE_ONLY
            return Plan(prefill=((live.rid, live.remaining_prefill),))

    reqs = [req(0, prompt=100, out=2), req(1, prompt=10, out=2)]
    eng = engine(reqs, ParkFirst())
    eng.step()
    eng.step()
    parked = eng.view.get(0)
    assert parked.parked and parked.prefilled == 50 and parked.kv_tokens == 50
    assert parked.phase == Phase.PREFILL
    run = eng.run()
    assert (run.requests.tokens_out == 2).all() and run.recomputes == 0


def test_empty_run_and_observers_get_every_iteration():
    empty = engine([], FullPrefill()).run()
    assert empty.requests.empty and empty.iterations.empty

    class Counter:
        def __init__(self):
            self.records = []

        def observe(self, record):
            self.records.append(record)
            return {"seen": len(self.records)} if record.index % 2 == 0 else None

        def summary(self):
            return {"n": len(self.records)}

    obs = Counter()
    run = engine([req(0, prompt=300, out=6)], FixedChunk(128), observers=[obs]).run()
    it = run.iterations
    assert [r.actual_ms for r in obs.records] == list(it["duration_ms"])
    assert [r.pred_p50 for r in obs.records] == list(it["pred_p50_ms"])
    seen = it["seen"]
    assert seen.iloc[0] == 1 and seen.isna().iloc[1] and seen.iloc[2] == 3  # missing → null
    assert run.observers == {"Counter": {"n": len(it)}}
