"""RunningKV (the running requests' KV sum kept between steps) against a recount.

Plain Python: requests are small objects; vLLM's effect on them is modelled as the
scheduler sees it (scheduled tokens added, admissions appended, frees, preemptions
that invalidate). The same property inside vLLM's real scheduler is
``test_vllm_step_equality.py``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from servecal.integrations.vllm.kvsum import RunningKV


@dataclass(eq=False)
class Req:
    request_id: str
    num_computed_tokens: int = 0


def recount(running: list[Req]) -> int:
    return sum(r.num_computed_tokens for r in running)


def test_kept_sum_equals_a_recount_through_random_steps() -> None:
    rng = random.Random(3)
    kv = RunningKV()
    running: list[Req] = []
    made = 0
    for _ in range(2000):
        assert kv.total(running) == recount(running)
        n_before = len(running)
        tokens = {r.request_id: rng.choice([1, 1, 1, 0, 7]) for r in running}
        tokens = {k: v for k, v in tokens.items() if v}
        event = rng.random()
        if event < 0.05 and running:  # preemption: vLLM resets it and drops it
            victim = running.pop()
            kv.invalidate()
            victim.num_computed_tokens = 0
            tokens.pop(victim.request_id, None)
        elif event < 0.4:  # admissions, with a cached prefix
            for _ in range(rng.randint(1, 3)):
                made += 1
                req = Req(f"r{made}", rng.choice([0, 16, 64]))
                running.append(req)
                tokens[req.request_id] = rng.randint(1, 300)
        by_id = {r.request_id: r for r in running}
        for rid, t in tokens.items():
            by_id[rid].num_computed_tokens += t
        if event >= 0.05:
            kv.scheduled(running, n_before, tokens, sum(tokens.values()))
        for req in [r for r in running if rng.random() < 0.03]:  # finished or aborted
            kv.left(req)
            running.remove(req)
        if rng.random() < 0.02:  # a request freed that never ran: no effect
            kv.left(Req("waiting", 99))
    assert kv.recounts < 200  # the kept sum answered most steps


def test_an_unseen_removal_is_caught_by_the_length_check() -> None:
    kv = RunningKV()
    running = [Req("a", 5), Req("b", 7)]
    assert kv.total(running) == 12
    running.pop()  # removed without left(): a path the tracker does not model
    assert kv.total(running) == 5 and kv.recounts == 2


def test_untrusted_recounts_every_time() -> None:
    kv = RunningKV(trusted=False)
    running = [Req("a", 5)]
    assert kv.total(running) == 5
    running[0].num_computed_tokens = 3  # e.g. rejected speculative tokens rolled back
    assert kv.total(running) == 3 and kv.recounts == 2
