"""The engine refuses invalid plans with an error that names the policy."""

from __future__ import annotations

import pytest
from enginekit import engine, req

from servecal.sched.plan import DECODE_ONLY, Plan, PlanError


class Scripted:
    """Returns the given plans in turn, then decode-only / whole prompts."""

    def __init__(self, *plans: Plan) -> None:
        self.plans = list(plans)

    def plan(self, view, predictor):
        if self.plans:
            return self.plans.pop(0)
        live = view.next_prefill()
        return Plan(prefill=((live.rid, live.remaining_prefill),)) if live else DECODE_ONLY


def _run(plans, reqs=None, kv=10_000):
    reqs = reqs or [req(0, prompt=100, out=5), req(1, prompt=50, out=5)]
    return engine(reqs, Scripted(*plans), kv=kv).run()


@pytest.mark.parametrize(
    ("plans", "message"),
    [
        ([Plan(prefill=((0, 101),))], "prefills 101 tokens of request 0, which has 100 left"),
        ([Plan(prefill=((0, 0),))], "prefills 0 tokens"),
        ([Plan(prefill=((7, 10),))], "request 7, which has no prefill left"),
        ([Plan(prefill=((0, 10),)), Plan(decode=(0,))], "decodes request 0, whose prefill"),
        ([Plan(prefill=((0, 10), (0, 20)))], "names a request twice"),
        ([Plan(prefill=((0, 100),)), Plan(prefill=((1, 50),), decode=(0, 0))], "twice"),
        ([Plan(preempt=(1,))], "preempts request 1, which is not running"),
        ([Plan(park=(0,))], "parks request 0, which is not running"),
        ([Plan(prefill=((0, 100),)), Plan(reject=(0,))], "rejects request 0"),
        ([Plan(exceptions=(1,))], "SLO exception for 1"),
    ],
)
def test_invalid_plans_are_rejected_naming_the_policy(plans, message):
    with pytest.raises(PlanError, match="policy 'Scripted'") as err:
        _run(plans)
    assert message in str(err.value)


def test_memory_overflow_is_rejected():
    with pytest.raises(PlanError, match="needs 120 KV tokens after the iteration; capacity"):
        _run([Plan(prefill=((0, 100),)), Plan(prefill=((1, 19),))], kv=110)


def test_plan_running_nothing_with_nothing_to_wait_for_is_an_error():
    class Lazy:
        def plan(self, view, predictor):
            return DECODE_ONLY

    with pytest.raises(PlanError, match="plans nothing while 1 requests wait"):
        engine([req(0)], Lazy()).run()


def test_valid_side_orders_run():
    reqs = [req(0, prompt=100, out=5), req(1, prompt=50, out=5), req(2, prompt=10, out=2)]
    plans = [Plan(prefill=((0, 100),)), Plan(preempt=(0,), reject=(2,), prefill=((1, 50),))]
    run = engine(reqs, Scripted(*plans)).run()
    q = run.requests.set_index("rid")
    assert q.loc[0, "recomputes"] == 1 and q.loc[0, "tokens_out"] == 5
    assert q.loc[2, "rejected"] and q.loc[2, "tokens_out"] == 0
    assert run.recomputes == 1
