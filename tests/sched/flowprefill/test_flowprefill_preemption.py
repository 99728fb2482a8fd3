"""Operator-level preemption: park at the next boundary, resume where it stopped."""

from __future__ import annotations

import numpy as np
import pytest
from flowkit import EXACT, driver, req

from servecal.sched.flowprefill import Fcfs, FlowPrefill, OperatorModel

LONG = 4000  # tokens: 0.35 + 0.40 + 0.006·4000 = 24.75 ms, 64 operators


def _segments(frame, rid):
    rows = frame[frame["rids"].str.split().apply(lambda r: str(rid) in r)]
    return rows.reset_index(drop=True)


@pytest.mark.parametrize("granularity", ["layer", "attn-mlp", "fine"])
def test_parked_request_resumes_at_its_operator_with_total_work_unchanged(granularity):
    # the long request is mid-prefill when a short, urgent one arrives at 10 ms
    d = driver([req(0, 0.0, LONG, 10_000.0), req(1, 10.0, 100, 50.0)], FlowPrefill(),
               granularity=granularity)  # fmt: skip
    run = d.run()
    it = run.iterations
    long = _segments(it, 0)
    assert list(long["parked"]) == [True, False]
    stopped = int(long.loc[0, "ops_to"])
    assert 0 < stopped < OperatorModel(granularity=granularity).n_ops
    assert int(long.loc[1, "ops_from"]) == stopped  # resumes at the operator it stopped at
    assert long["ops_to"].iloc[-1] == OperatorModel(granularity=granularity).n_ops
    # total work of the long request is what it costs uninterrupted
    assert long["duration_ms"].sum() == pytest.approx(EXACT.predict(0, LONG), rel=1e-12)
    # nothing recomputed: the short one runs between the two halves
    short = _segments(it, 1)
    assert len(short) == 1
    assert short.loc[0, "start_ms"] == pytest.approx(
        long.loc[0, "start_ms"] + long.loc[0, "duration_ms"]
    )
    reqs = run.requests.set_index("rid")
    assert reqs.loc[0, "first_token_ms"] == pytest.approx(
        EXACT.predict(0, LONG) + EXACT.predict(0, 100)
    )
    assert reqs.loc[0, "parks"] == 1 and reqs.loc[1, "parks"] == 0


def test_park_takes_effect_at_the_next_boundary_after_the_decision():
    d = driver([req(0, 0.0, LONG, 10_000.0), req(1, 10.0, 100, 50.0)], FlowPrefill())
    flow = d.run()
    fractions = OperatorModel().fractions([LONG], [0])
    ends = np.cumsum(fractions * EXACT.predict(0, LONG))
    boundary = ends[np.searchsorted(ends, 10.0)]
    assert d.recorder.blocking_ms.tolist() == [pytest.approx(boundary - 10.0)]
    # blocking never exceeds the operator that was running
    assert flow.counters["max_blocking_ms"] <= flow.counters["max_operator_ms"]


def test_finer_operators_block_for_less():
    blocking = {}
    for g in ("layer", "attn-mlp", "fine"):
        d = driver([req(0, 0.0, LONG, 10_000.0), req(1, 10.0, 100, 50.0)], FlowPrefill(),
                   granularity=g)  # fmt: skip
        flow = d.run()
        blocking[g] = flow.counters["max_operator_ms"]
    assert blocking["fine"] < blocking["attn-mlp"] < blocking["layer"]


def test_fcfs_never_parks_and_the_short_request_waits():
    d = driver([req(0, 0.0, LONG, 10_000.0), req(1, 10.0, 100, 50.0)], Fcfs())
    flow = d.run()
    assert flow.counters["parked_batches"] == 0
    first = flow.requests.set_index("rid")["first_token_ms"]
    assert first[1] == pytest.approx(EXACT.predict(0, LONG) + EXACT.predict(0, 100))


def test_operator_fractions_follow_the_shape_arithmetic():
    m = OperatorModel(granularity="fine")
    f = m.fractions([1000], [3000])
    assert f.size == m.n_ops and f.sum() == pytest.approx(1.0)
    w = m.layer_weights([1000], [3000])
    w2 = m.layer_weights([2000], [3000])
    # the MLP (gate-up, down) is linear in tokens, attention core ∝ t·(p + t/2)
    h = 4096
    assert w[4] / w[3] == pytest.approx(0.5)
    core = 4 * h * 1000 * (3000 + 500)
    mlp = (4 * h * 14336 + 2 * 14336 * h) * 1000
    assert w[1] / (w[3] + w[4]) == pytest.approx(core / mlp)
    assert w2[1] / (w2[3] + w2[4]) > w[1] / (w[3] + w[4])  # longer chunk: attention heavier
    assert m.done_fraction(1000, 0, 0) == 0.0 and m.done_fraction(1000, 0, m.n_ops) == 1.0


def test_bad_operator_model_is_refused():
    with pytest.raises(ValueError, match="granularity"):
        OperatorModel(granularity="kernel")
    with pytest.raises(ValueError, match="layers"):
        OperatorModel(layers=0)
