"""Plan checks: the rules every plan must satisfy before the engine runs it.

* every chunk is within its request's remaining prefill (1 ≤ tokens ≤ left), of a
  request that still has prefill left;
* decodes only for requests whose prefill is done;
* no request named twice (across decode, prefill, preempt, park, reject);
* preempted and parked requests are running, rejected ones are new waiting requests,
  SLO exceptions name decoding requests;
* KV after the iteration ``≤ M``: in use − freed by preemption + decodes + chunks.
"""

from __future__ import annotations

from collections.abc import Callable

from servecal.sched.live import LiveRequest, Phase
from servecal.sched.plan import Plan, PlanError
from servecal.sched.state import EngineState


def check_plan(
    state: EngineState, plan: Plan, fail: Callable[[str], PlanError]
) -> tuple[int, list[tuple[LiveRequest, int]]]:
    """Check ``plan`` against ``state``; return (decodes, chunks to run).

    Raises ``fail(reason)`` (a :class:`PlanError` naming the policy). Nothing is
    changed, so a refused plan leaves the engine as it was.
    """
    ready = state.ready
    freed = 0
    skipped_ready = 0  # ready requests that will not decode under decode=None
    named: list[int] = []
    if plan.preempt or plan.park or plan.reject or plan.exceptions:  # rare: most plans pay no call
        freed, skipped_ready = _check_side_orders(state, plan, fail)
        named.extend(plan.preempt)
        named.extend(plan.park)
        named.extend(plan.reject)
    chunks: list[tuple[LiveRequest, int]] = []
    total = 0
    for rid, tokens in plan.prefill:
        live = state.prefilling.get(rid) or state.waiting.get(rid)
        if live is None:
            raise fail(f"prefills request {rid}, which has no prefill left")
        left = live.prefill_target - live.prefilled
        if not 1 <= tokens <= left:
            raise fail(f"prefills {tokens} tokens of request {rid}, which has {left} left")
        chunks.append((live, tokens))
        named.append(rid)
        total += tokens
    if plan.decode is None:
        n_decode = state.n_ready - len(state.parked_ready) - skipped_ready
    else:
        for rid in plan.decode:
            if rid not in ready:
                raise fail(f"decodes request {rid}, whose prefill is not done")
        n_decode = len(plan.decode)
        named.extend(plan.decode)
    if len(named) > 1 and len(set(named)) != len(named):
        raise fail("names a request twice")
    need = state.kv_used - freed + n_decode + total
    if need > state.kv_capacity:
        raise fail(f"needs {need} KV tokens after the iteration; capacity is {state.kv_capacity}")
    return n_decode, chunks


def _check_side_orders(
    state: EngineState, plan: Plan, fail: Callable[[str], PlanError]
) -> tuple[int, int]:
    """Check the plan's preemptions, parks, rejections and SLO exceptions; return (KV
    tokens the preemptions free, ready requests they and the parks take out of decode)."""
    running, ready = state.running, state.ready
    freed = 0
    skipped_ready = 0
    for rid in plan.preempt:
        live = running.get(rid)
        if live is None:
            raise fail(f"preempts request {rid}, which is not running")
        freed += live.kv_tokens - live.shared_tokens  # shared blocks may stay referenced
        skipped_ready += live.phase == Phase.READY
    for rid in plan.park:
        live = running.get(rid)
        if live is None:
            raise fail(f"parks request {rid}, which is not running")
        skipped_ready += live.phase == Phase.READY and rid not in state.parked_ready
    for rid in plan.reject:
        live = state.waiting.get(rid)
        if live is None or live.recomputes or live.tokens_out:
            raise fail(f"rejects request {rid}, which is not a new waiting request")
    for rid in plan.exceptions:
        if rid not in ready:
            raise fail(f"records an SLO exception for {rid}, which is not decoding")
    return freed, skipped_ready
