"""Small factories for engine tests: requests, engines, exact predictors."""

from __future__ import annotations

import math

import numpy as np

from servecal.costmodels import AnalyticPredictor
from servecal.sched.engine import Engine, EngineConfig
from servecal.sched.live import Phase
from servecal.sched.policy import Policy
from servecal.sched.request import Request
from servecal.sched.truth import AnalyticTruth


def req(rid: int, at: float = 0.0, prompt: int = 100, out: int = 10, tpot: float = 25.0,
        ttft: float = 1e9) -> Request:  # fmt: skip
    return Request(rid, at, prompt, out, ttft_slo_ms=ttft, tpot_slo_ms=tpot)


def random_requests(
    rng: np.random.Generator, n: int, rate: float = 40.0, long_frac: float = 0.2,
    tpot: float | tuple[float, ...] = 25.0,
) -> list[Request]:  # fmt: skip
    """Poisson arrivals, an 80/20 short/long prompt mix."""
    t = 0.0
    out = []
    for i in range(n):
        t += rng.exponential(1000.0 / rate)
        long = rng.random() < long_frac
        prompt = int(rng.integers(2000, 6000)) if long else int(rng.integers(20, 400))
        d = tpot if isinstance(tpot, float) else float(rng.choice(tpot))
        out.append(req(i, t, prompt, int(rng.integers(1, 200)), tpot=d))
    return out


def engine(
    requests: list[Request],
    policy: Policy,
    *,
    kv: int = 500_000,
    truth: AnalyticTruth | None = None,
    predictor=None,
    seed: int = 0,
    observers=(),
) -> Engine:
    truth = truth or AnalyticTruth()
    return Engine(
        requests,
        policy,
        predictor or AnalyticPredictor(),
        truth.executor(np.random.default_rng(seed)),
        EngineConfig(kv_capacity=kv),
        observers=observers,
        policy_name=type(policy).__name__,
    )


class FakeLive:
    """A request as a policy sees it (only what policies read)."""

    def __init__(self, rid, remaining, prefilled=0, arrival_ms=0.0, started=False,
                 deadline_ms=math.inf, tpot=25.0):  # fmt: skip
        self.rid = rid
        self.remaining_prefill = remaining
        self.prefilled = prefilled
        self.arrival_ms = arrival_ms
        self.phase = Phase.PREFILL if started else Phase.WAITING
        self.deadline_ms = deadline_ms
        self.tpot_slo_ms = tpot


class FakeView:
    """A hand-built engine state for policy unit tests."""

    def __init__(self, now=0.0, ready=(), queue=(), kv_capacity=10**9, kv_used=0, ctx=0.0,
                 new_arrivals=(), running=0):  # fmt: skip
        self.now_ms = now
        self.ready = list(ready)
        self.queue = list(queue)
        self.kv_capacity = kv_capacity
        self.kv_used = kv_used
        self.ctx_mean = ctx
        self.new_arrivals = tuple(new_arrivals)
        self.new_finished = ()
        self.running = [None] * running
        self.waiting = [q for q in self.queue if q.phase == Phase.WAITING]

    @property
    def n_decode(self):
        return len(self.ready)

    @property
    def prefill_room(self):
        return self.kv_capacity - self.kv_used - len(self.ready)

    def next_prefill(self):
        return self.queue[0] if self.queue else None

    def prefill_queue(self):
        return iter(self.queue)

    def get(self, rid):
        return next(x for x in self.queue + self.ready if x.rid == rid)

    def earliest_deadline_ms(self):
        return min((r.deadline_ms for r in self.ready), default=math.inf)
