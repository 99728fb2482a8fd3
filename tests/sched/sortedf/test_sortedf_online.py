"""Sorted-F-Online inside the reference engine: valid plans, no forced preemption."""

from __future__ import annotations

import numpy as np
import pytest

from servecal.costmodels import AnalyticPredictor
from servecal.sched.engine import Engine, EngineConfig
from servecal.sched.request import Request
from servecal.sched.sortedf.online import SortedFOnline
from servecal.sched.truth import AnalyticTruth


def _requests(rng: np.random.Generator, n: int, rate: float) -> list[Request]:
    t = np.cumsum(rng.exponential(1000.0 / rate, n))
    long = rng.random(n) < 0.2
    prompt = np.where(long, rng.integers(1500, 3500, n), rng.integers(20, 600, n))
    out = rng.integers(1, 150, n)
    return [Request(i, float(t[i]), int(prompt[i]), int(out[i])) for i in range(n)]


def _run(reqs: list[Request], policy, kv: int):
    return Engine(
        reqs,
        policy,
        AnalyticPredictor(),
        AnalyticTruth().executor(np.random.default_rng(0)),
        EngineConfig(kv_capacity=kv),
        policy_name="sorted-f-online",
    ).run()


@pytest.mark.parametrize("seed", [0, 1])
def test_online_policy_finishes_everything_without_preemption(seed: int) -> None:
    reqs = _requests(np.random.default_rng(seed), 80, rate=40.0)
    policy = SortedFOnline()
    run = _run(reqs, policy, kv=8000)
    df = run.requests
    assert df["completion_ms"].notna().all()
    assert (df["tokens_out"] == df["output_tokens"]).all()
    assert run.recomputes == 0  # clairvoyant admission never overfills the KV
    assert (df["completion_ms"] >= df["arrival_ms"]).all()
    assert policy.replans >= 1 and policy.summary()["replans"] == policy.replans


def test_online_policy_replans_on_arrivals_only() -> None:
    # Everything arrives at 0: one plan covers the whole run.
    reqs = [Request(i, 0.0, 50 + 10 * i, 5 + i) for i in range(12)]
    policy = SortedFOnline()
    run = _run(reqs, policy, kv=400)
    assert run.requests["completion_ms"].notna().all()
    assert policy.replans == 1


def test_online_policy_rejects_unknown_solver() -> None:
    with pytest.raises(ValueError, match="unknown solver"):
        SortedFOnline(solver="magic")
