"""Drift end to end: the engine feeds the monitor, the adaptive margin keeps SLOWeave safe."""

from __future__ import annotations

import numpy as np
import pytest

from servecal.costmodels.drift import AdaptiveMargin, DriftMonitor, NoiseProfile
from servecal.sched.engine import Engine, EngineConfig
from servecal.sched.experiment import RunSpec, summarize
from servecal.sched.policies import PolicySpec, make_policy
from servecal.sched.truth import AnalyticTruth, Drift
from servecal.sched.workloads import generate

SIGMA = 0.05
DRIFT_AT_MS = 5000.0


#: The drift monitor's own adaptation is what these runs test: SLOWeave plans on the
#: whole budget (the default margin controller would absorb the drift by itself, which
#: test_default_controller_absorbs_the_drift_too checks).
POLICY = "sloweave-fixed-margin"


def run(drift: Drift | None, mode: str, seed: int = 0, policy: str = POLICY):
    ws, es = np.random.SeedSequence(seed).spawn(2)
    requests = generate("mixed", 55.0, n_requests=600, tpot_slo_ms=25.0,
                        rng=np.random.default_rng(ws))  # fmt: skip
    truth = AnalyticTruth(sigma=SIGMA)
    predictor = truth.oracle()
    observers = []
    if mode != "plain":
        monitor = DriftMonitor(NoiseProfile.lognormal(SIGMA))
        observers.append(monitor)
        if mode == "adaptive":
            predictor = AdaptiveMargin(predictor, monitor)
    engine = Engine(
        requests,
        make_policy(policy),
        predictor,
        truth.executor(np.random.default_rng(es), drift),
        EngineConfig(),
        observers=observers,
        policy_name=policy,
    )
    result = engine.run()
    spec = RunSpec("mixed", PolicySpec(policy), tpot_slo_ms=25.0, rate=55.0)
    return result, summarize(spec, result)


@pytest.fixture(scope="module")
def runs():
    drift = Drift(DRIFT_AT_MS, 1.15)
    return {
        "clean": run(None, "monitor"),
        "plain": run(drift, "plain"),
        "monitor": run(drift, "monitor"),
        "adaptive": run(drift, "adaptive"),
        "controlled": run(drift, "plain", policy="sloweave"),
    }


def test_monitor_stays_quiet_without_drift(runs) -> None:
    result, _ = runs["clean"]
    drift = result.observers["DriftMonitor"]["drift"]
    assert drift["alarms"] == []
    assert set(result.iterations["drift_state"]) <= {"ok", "warn"}


def test_monitor_flags_the_drift_soon_after_it_starts(runs) -> None:
    result, summary = runs["monitor"]
    drift = result.observers["DriftMonitor"]["drift"]
    assert drift["state"] == "drift"
    first = drift["alarms"][0]
    assert first["detector"] == "slowdown"
    assert DRIFT_AT_MS <= first["time_ms"] < DRIFT_AT_MS + 1000.0
    assert drift["factor"] == pytest.approx(1.15, abs=0.04)
    states = result.iterations["drift_state"].to_numpy()
    start = result.iterations["start_ms"].to_numpy()
    assert (states[start > first["time_ms"] + 1.0] == "drift").all()
    assert "recalibrate" in drift["recommendation"]
    # observing changes nothing about the schedule itself
    assert summary["tpot_attainment"] == runs["plain"][1]["tpot_attainment"]


def test_adaptive_margin_keeps_tpot_attainment_near_the_clean_run(runs) -> None:
    clean = runs["clean"][1]["tpot_attainment"]
    plain = runs["plain"][1]["tpot_attainment"]
    adaptive = runs["adaptive"][1]["tpot_attainment"]
    assert plain < clean - 0.2  # without adaptation the +15% drift breaks deadlines
    assert adaptive > clean - 0.05
    margin = runs["adaptive"][0].observers["AdaptiveMargin"]["adaptive_margin"]
    assert margin["active"] and margin["max_scale"] > 1.1


def test_default_controller_absorbs_the_drift_too(runs) -> None:
    # no monitor: the gap-miss controller sees the drifted iterations overshoot and
    # shrinks the budget (issue 31), where the whole-budget plan loses > 20 points
    clean = runs["clean"][1]["tpot_attainment"]
    assert runs["controlled"][1]["tpot_attainment"] > clean - 0.1
