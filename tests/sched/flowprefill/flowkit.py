"""Small factories for the FlowPrefill tests: requests, drivers, exact truths."""

from __future__ import annotations

import numpy as np

from servecal.costmodels import AnalyticPredictor
from servecal.sched.flowprefill import DriverConfig, OperatorDriver, OperatorModel
from servecal.sched.request import Request
from servecal.sched.truth import AnalyticTruth

EXACT = AnalyticPredictor()


def req(rid: int, at: float, prompt: int, ttft: float, out: int = 1, tpot: float = 100.0,
        cls: str = "default") -> Request:  # fmt: skip
    return Request(rid, at, prompt, out, ttft_slo_ms=ttft, tpot_slo_ms=tpot, slo_class=cls)


def driver(requests, policy, *, setting="prefill", mode="event", kv=500_000,
           granularity="attn-mlp", truth=None, seed=0) -> OperatorDriver:  # fmt: skip
    truth = truth or AnalyticTruth()
    return OperatorDriver(
        requests,
        policy,
        EXACT if truth.sigma == 0 else truth.oracle(),
        truth.executor(np.random.default_rng(seed)),
        DriverConfig(setting=setting, mode=mode, kv_capacity=kv,
                     operators=OperatorModel(granularity=granularity)),
    )  # fmt: skip


def random_requests(rng: np.random.Generator, n: int, rate: float, out_max: int = 1):
    """Poisson arrivals; 70% short tight-SLO prompts, 30% long loose-SLO ones."""
    t = 0.0
    out = []
    for i in range(n):
        t += rng.exponential(1000.0 / rate)
        if rng.random() < 0.7:
            prompt, ttft = int(rng.integers(50, 1500)), 250.0
        else:
            prompt, ttft = int(rng.integers(2000, 9000)), 4000.0
        out.append(req(i, t, prompt, ttft, out=int(rng.integers(1, out_max + 1))))
    return out
