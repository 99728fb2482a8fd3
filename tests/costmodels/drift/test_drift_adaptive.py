"""Adaptive margins: only add, settle at the target miss rate, keep max_chunk exact."""

import numpy as np
import pytest

from servecal.costmodels import AnalyticPredictor, Predictor
from servecal.costmodels.drift import AdaptiveConfig, AdaptiveMargin
from servecal.costmodels.predictor import PLAN_QUANTILE

BASE = AnalyticPredictor(sigma=0.05)


class Always:
    state = "drift"


class Quiet:
    state = "ok"


def record(n: int, c: int, actual: float) -> dict:
    return {"n_decode": n, "chunk": c, "ctx": 0, "prefix": 0, "actual_ms": actual}


def drive(ad: AdaptiveMargin, rng: np.random.Generator, steps: int, factor: dict) -> None:
    """Truth = BASE's log-normal times ``factor[chunk]``; chunks drawn from the keys."""
    chunks = list(factor)
    for _ in range(steps):
        n, c = int(rng.integers(1, 31)), int(rng.choice(chunks))
        t = float(BASE.predict(n, c)) * float(np.exp(0.05 * rng.standard_normal())) * factor[c]
        ad.observe(record(n, c, t))


def brute(ad: AdaptiveMargin, n: int, budget: float, limit: int) -> int:
    best = 0
    for c in range(1, limit + 1):
        if float(ad.predict(n, c, q=PLAN_QUANTILE)) + float(ad.margin(n, c)) <= budget:
            best = c
    return best


def test_is_a_predictor_and_passes_the_base_through_while_ok() -> None:
    ad = AdaptiveMargin(BASE, Quiet())
    assert isinstance(ad, Predictor)
    drive(ad, np.random.default_rng(0), 500, {512: 1.3})
    assert not ad.active
    assert ad.margin(8, 512) == BASE.margin(8, 512)
    assert ad.max_chunk(8, 0, 0, 10.0, 4096) == BASE.max_chunk(8, 0, 0, 10.0, 4096)
    assert ad.predict(8, 512, q=0.99) == BASE.predict(8, 512, q=0.99)


def test_needs_a_monitor_unless_always() -> None:
    with pytest.raises(ValueError, match="monitor"):
        AdaptiveMargin(BASE)
    AdaptiveMargin(BASE, config=AdaptiveConfig(always=True))


def test_margin_settles_where_misses_are_one_percent() -> None:
    ad = AdaptiveMargin(BASE, Always())
    rng = np.random.default_rng(1)
    drive(ad, rng, 6000, {512: 1.15})
    misses, n_obs = 0, 4000
    for _ in range(n_obs):
        n = int(rng.integers(1, 31))
        t = float(BASE.predict(n, 512)) * float(np.exp(0.05 * rng.standard_normal())) * 1.15
        misses += t > float(ad.predict(n, 512, q=PLAN_QUANTILE)) + float(ad.margin(n, 512))
        ad.observe(record(n, 512, t))
    assert misses / n_obs < 0.03
    s = ad.summary()["adaptive_margin"]
    assert s["active"] and s["max_scale"] > 1.1
    assert 1.1 < s["max_scale"] < 1.35  # tracks the drift, does not run away


def test_no_drift_no_extra_margin_even_when_always_on() -> None:
    ad = AdaptiveMargin(BASE, config=AdaptiveConfig(always=True))
    drive(ad, np.random.default_rng(2), 3000, {0: 1.0, 512: 1.0})
    assert float(ad.scales().max()) < 1.02


def test_max_chunk_is_exact_against_brute_force_after_adaptation() -> None:
    ad = AdaptiveMargin(BASE, Always())
    drive(ad, np.random.default_rng(3), 3000, {100: 1.05, 600: 1.3, 2000: 1.1})
    assert (ad.scales()[2] > 1.0).any()  # n_decode 8-31 adapted
    rng = np.random.default_rng(4)
    for _ in range(25):
        n = int(rng.integers(1, 31))
        budget = float(rng.uniform(1.0, 20.0))
        limit = int(rng.integers(1, 2500))
        assert ad.max_chunk(n, 0, 0, budget, limit) == brute(ad, n, budget, limit)


def test_scales_are_monotone_in_the_chunk_and_margin_vectorises() -> None:
    ad = AdaptiveMargin(BASE, Always())
    drive(ad, np.random.default_rng(5), 2000, {600: 1.4, 2000: 1.0})
    s = ad.scales()
    assert (np.diff(s, axis=1) >= 0).all()
    n = np.array([4, 16, 16, 64])
    c = np.array([0, 600, 2000, 100])
    vec = ad.margin(n, c)
    assert vec == pytest.approx([ad.margin(int(a), int(b)) for a, b in zip(n, c, strict=True)])
    assert ad.margin(16, 2000) >= ad.margin(16, 600) > 0


def test_measured_slowdown_is_a_floor_for_every_region() -> None:
    class Alarmed:
        state = "drift"
        slowdown_factor = 1.2

    ad = AdaptiveMargin(BASE, Alarmed())
    ad.observe(record(4, 0, float(BASE.predict(4, 0))))
    assert float(ad.scales().min()) == pytest.approx(1.2, abs=0.02)
    p99 = float(BASE.predict(40, 700, q=PLAN_QUANTILE))
    assert float(ad.margin(40, 700)) == pytest.approx(0.2 * p99, rel=0.1)


def test_watch_builds_monitor_and_optional_wrapper() -> None:
    from servecal.costmodels.drift import DriftMonitor, watch

    pred, mon = watch(BASE)
    assert pred is BASE and isinstance(mon, DriftMonitor)
    assert mon.profile.scale == pytest.approx(0.05)
    wrapped, mon2 = watch(BASE, adaptive=True)
    assert isinstance(wrapped, AdaptiveMargin) and wrapped.monitor is mon2
