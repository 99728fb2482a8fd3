"""Plan validation: the rules every plan must satisfy before the engine runs it.

* every chunk is within its request's remaining prefill (1 ≤ tokens ≤ left), of a
  request that still has prefill left;
* decodes only for requests whose prefill is done;
* no request named twice (across decode, prefill, preempt, park, reject);
* preempted and parked requests are running, rejected ones are new waiting requests,
  SLO exceptions name decoding requests;
* KV after the iteration ``≤ M``: in use − freed by preemption + decodes + chunks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servecal.sched.live import LiveRequest, Phase
from servecal.sched.plan import Plan

if TYPE_CHECKING:
    from servecal.sched.engine import Engine


def check_plan(engine: Engine, plan: Plan) -> tuple[int, list[tuple[LiveRequest, int]]]:
    """Validate ``plan`` against ``engine``'s state; return (decodes, chunks to run).

    Raises :class:`PlanError` naming the policy. Nothing is changed, so a refused plan
    leaves the engine as it was.
    """
    running, ready = engine._running, engine._ready
    freed = 0
    skipped_ready = 0  # ready requests that will not decode under decode=None
    named: list[int] = []
    if plan.preempt or plan.park or plan.reject or plan.exceptions:
        for rid in plan.preempt:
            live = running.get(rid)
            if live is None:
                raise engine._fail(f"preempts request {rid}, which is not running")
            freed += live.kv_tokens
            skipped_ready += live._phase == Phase.READY
        for rid in plan.park:
            live = running.get(rid)
            if live is None:
                raise engine._fail(f"parks request {rid}, which is not running")
            skipped_ready += live._phase == Phase.READY and rid not in engine._parked_ready
        for rid in plan.reject:
            live = engine._waiting.get(rid)
            if live is None or live._preemptions or live._tok:
                raise engine._fail(f"rejects request {rid}, which is not a new waiting request")
        for rid in plan.exceptions:
            if rid not in ready:
                raise engine._fail(f"records an SLO exception for {rid}, which is not decoding")
        named.extend(plan.preempt)
        named.extend(plan.park)
        named.extend(plan.reject)
    chunks: list[tuple[LiveRequest, int]] = []
    total = 0
    for rid, tokens in plan.prefill:
        live = engine._prefilling.get(rid) or engine._waiting.get(rid)
        if live is None:
            raise engine._fail(f"prefills request {rid}, which has no prefill left")
        if not 1 <= tokens <= live._target - live._prefilled:
            raise engine._fail(
                f"prefills {tokens} tokens of request {rid}, "
                f"which has {live._target - live._prefilled} left"
            )
        chunks.append((live, tokens))
        named.append(rid)
        total += tokens
    if plan.decode is None:
        n_decode = engine._n_ready - len(engine._parked_ready) - skipped_ready
    else:
        for rid in plan.decode:
            if rid not in ready:
                raise engine._fail(f"decodes request {rid}, whose prefill is not done")
        n_decode = len(plan.decode)
        named.extend(plan.decode)
    if len(named) > 1 and len(set(named)) != len(named):
        raise engine._fail("names a request twice")
    need = engine._kv_used - freed + n_decode + total
    if need > engine._M:
        raise engine._fail(f"needs {need} KV tokens after the iteration; capacity is {engine._M}")
    return n_decode, chunks
