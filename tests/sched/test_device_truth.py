"""The ``device`` truth: its structure, its noise, its fast path and its CLI name."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from servecal.sched.device_truth import (
    PROFILE_PATH,
    DeviceTruth,
    device_truth,
    excess_at,
    step_edges,
)
from servecal.sched.experiment.models import load_truth
from servecal.sched.truth import Drift
from servecal.util.errors import InputError


def quiet(**overrides: float) -> DeviceTruth:
    """The shipped truth without noise (its median)."""
    return DeviceTruth.load(sigma=0.0, spike_prob=0.0, **overrides)


def test_shipped_profile_is_the_spec_scale_at_its_anchor() -> None:
    doc = json.loads(PROFILE_PATH.read_text())
    anchor = doc["derivation"]["anchor"]
    t = quiet()
    # docs/spec.md §1: T(40, 0) = 3.45 ms, kept at the anchor context; the formula's fixed terms
    assert t.median_ms(anchor["n_decode"], 0, anchor["ctx"]) == pytest.approx(3.45, abs=1e-3)
    assert (t.base, t.decode_fixed, t.prefill_fixed) == (0.35, 0.90, 0.40)
    assert t.prefill_per_token == 0.006
    # attention is a real share of the anchor iteration (the A100's), not 0 or all of it
    share = t.decode_attention * anchor["n_decode"] * anchor["ctx"] / 3.45
    assert share == pytest.approx(doc["derivation"]["decode_attention_share"], rel=1e-3)
    assert 0.05 < share < 0.6


def test_decode_cost_grows_with_n_times_ctx() -> None:
    t = quiet()
    for n in (1, 40, 300):
        grow = t.median_ms(n, 0, 4096) - t.median_ms(n, 0, 1024)
        assert grow == pytest.approx(n * 3072 * t.decode_attention, rel=1e-9)
    # a long-context batch costs visibly more than the context-free formula says
    assert t.median_ms(40, 0, 8192) > 2 * t.median_ms(40, 0, 1024)


def test_prefill_cost_grows_with_prefix_and_chunk_squared() -> None:
    t = quiet()
    c = 512
    for p in (0, 1000, 8000):
        grow = t.median_ms(0, c, 0, p + 1000) - t.median_ms(0, c, 0, p)
        assert grow == pytest.approx(t.prefill_attention * c * 1000, rel=1e-9)
    # the c²/2 term: per-token cost of a long chunk exceeds the slope of the steps alone
    excess = excess_at(t, 4096) - excess_at(t, 0)
    linear = t.prefill_fixed + t.prefill_per_token * excess
    assert t.median_ms(0, 4096) - t.base - linear == pytest.approx(
        t.prefill_attention * 4096 * 2048, rel=1e-9
    )


def test_steps_are_monotone_with_wave_jumps_a_straight_line_misses() -> None:
    t = quiet()
    e = [excess_at(t, k) for k in range(0, 9000)]
    assert all(b >= a for a, b in zip(e, e[1:], strict=False))
    assert excess_at(t, 0) == 0.0 and excess_at(t, 1) == 0.0
    # beyond the profile the slope is 1 token-equivalent per token
    top = t.step_tokens[-1]
    assert excess_at(t, top + 100) - excess_at(t, top) == pytest.approx(100)
    # the measured staircase: jumps of more than 30 token-equivalents inside one token,
    # the first just past 128 rows (a new 128-row tile); flat stretches between them
    edges = step_edges(t, 0, 1024, 30.0)
    assert edges[0] == 129 and len(edges) >= 5
    assert t.median_ms(0, 129) - t.median_ms(0, 128) > 0.3  # ms: one token opens a wave
    assert excess_at(t, 136) == excess_at(t, 129)  # ...and the next 7 ride on it
    # a chunk riding on decodes pays only the rows it adds: E(n + c) − E(n)
    assert t.median_ms(100, 20) - t.median_ms(100, 0) == pytest.approx(
        t.prefill_fixed
        + t.prefill_per_token * (excess_at(t, 120) - excess_at(t, 100))
        + t.prefill_attention * 20 * 10
    )


def test_vectorised_median_equals_the_scalar_path() -> None:
    t = quiet()
    rng = np.random.default_rng(3)
    n = rng.integers(0, 600, 500)
    c = rng.integers(0, 20000, 500)
    ctx = rng.uniform(0, 16000, 500)
    p = rng.uniform(0, 8000, 500)
    vec = t.median(n, c, ctx, p)
    scalar = [
        t.median_ms(int(a), int(b), float(x), float(y))
        for a, b, x, y in zip(n, c, ctx, p, strict=True)
    ]
    np.testing.assert_allclose(vec, scalar, rtol=1e-12)
    # and the executor, noiseless, is the same function
    ex = t.executor(np.random.default_rng(0))
    got = [
        ex.execute(int(a), int(b), float(x), float(y), 0.0)[0]
        for a, b, x, y in zip(n, c, ctx, p, strict=True)
    ]
    np.testing.assert_allclose(got, scalar, rtol=1e-12)


def test_noise_is_lognormal_with_rare_bounded_stalls() -> None:
    t = DeviceTruth.load(sigma=0.03, spike_prob=0.01, spike_lo=2.0, spike_hi=4.0)
    point = pd.DataFrame({"n_decode": [32], "chunk": [256], "ctx": [1000], "prefix": [0]})
    rows = t.draw(point, 200_000, np.random.default_rng(1))
    ratio = rows["ms"].to_numpy() / t.median_ms(32, 256, 1000, 0)
    stalls = ratio > 1.6  # exp(σZ) never reaches 1.6 at σ = 0.03
    assert stalls.mean() == pytest.approx(0.01, abs=0.001)
    body = np.log(ratio[~stalls])
    assert np.median(body) == pytest.approx(0.0, abs=0.001)
    assert body.std() == pytest.approx(0.03, rel=0.02)
    # stall factors spread over [lo, hi] (times the jitter)
    s = ratio[stalls]
    assert s.min() > 2.0 * math.exp(-0.15) and s.max() < 4.0 * math.exp(0.15)
    assert np.median(s) == pytest.approx(3.0, rel=0.05)


def test_executor_draws_the_distribution_that_draw_draws() -> None:
    t = DeviceTruth.load(sigma=0.05, spike_prob=0.02)
    point = pd.DataFrame({"n_decode": [8], "chunk": [1000], "ctx": [500], "prefix": [2000]})
    offline = t.draw(point, 50_000, np.random.default_rng(5))["ms"].to_numpy()
    ex = t.executor(np.random.default_rng(6))
    online = np.array([ex.execute(8, 1000, 500.0, 2000.0, 0.0)[0] for _ in range(50_000)])
    for q in (0.1, 0.5, 0.9, 0.99):
        assert np.quantile(online, q) == pytest.approx(np.quantile(offline, q), rel=0.02)


def test_executor_takes_its_random_numbers_in_blocks() -> None:
    """The hot path: no numpy call per iteration, one block of draws per 4,096."""

    class Counting:
        def __init__(self) -> None:
            self.rng, self.calls = np.random.default_rng(0), 0

        def standard_normal(self, size: int) -> np.ndarray:
            self.calls += 1
            return self.rng.standard_normal(size)

        def random(self, size: int) -> np.ndarray:
            return self.rng.random(size)

    counting = Counting()
    ex = DeviceTruth.load().executor(counting)  # type: ignore[arg-type]
    for i in range(10_000):
        t, e = ex.execute(i % 300, (i * 37) % 5000, 900.0, 100.0, float(i))
        assert isinstance(t, float) and t > 0 and isinstance(e, float) and e > 0
    assert counting.calls == 3  # ceil(10,000 / 4,096)


def test_drift_and_power() -> None:
    t = DeviceTruth.load(sigma=0.0, spike_prob=0.0, power_w=400.0)
    ex = t.executor(np.random.default_rng(0), Drift(at_ms=100.0, factor=1.25))
    before, e0 = ex.execute(16, 64, 800.0, 0.0, 50.0)
    after, e1 = ex.execute(16, 64, 800.0, 0.0, 150.0)
    assert after == pytest.approx(1.25 * before)
    assert e0 == pytest.approx(400.0 * before / 1000.0) and e1 == pytest.approx(0.4 * after)
    assert t.energy_source == "model"  # the constant power asked for, not the power model
    assert quiet().energy_source == "model:a100-llama3-8b"
    assert DeviceTruth.load(power=None).energy_source == "none"


def test_oracle_max_chunk_is_the_largest_fitting_chunk() -> None:
    t = DeviceTruth.load(sigma=0.02, spike_prob=0.0)
    oracle = t.oracle()
    rng = np.random.default_rng(7)
    for _ in range(40):
        n, ctx, p = (
            int(rng.integers(0, 200)),
            int(rng.integers(0, 4000)),
            int(rng.integers(0, 4000)),
        )
        budget, limit = float(rng.uniform(1.0, 30.0)), int(rng.integers(1, 5000))
        got = oracle.max_chunk(n, ctx, p, budget, limit)
        fits = [c for c in range(1, limit + 1) if oracle.predict(n, c, ctx, p, q=0.99) <= budget]
        assert got == (max(fits) if fits else 0)
    assert oracle.predict(4, 100, 10, 0) == pytest.approx(t.median_ms(4, 100, 10, 0))
    assert oracle.margin(4, 100) == 0.0
    arr = oracle.predict(np.array([4, 8]), np.array([100, 0]), 10, 0, q=0.99)
    assert arr[0] == pytest.approx(oracle.predict(4, 100, 10, 0, q=0.99))


def test_truth_name_device_options_and_errors() -> None:
    t = load_truth("device")
    assert isinstance(t, DeviceTruth) and t == DeviceTruth.load()
    t2 = device_truth("sigma=0.1,spike_prob=0,power_w=300")
    assert (t2.sigma, t2.spike_prob, t2.power_w) == (0.1, 0.0, 300.0)
    assert t2.content_hash() != t.content_hash()
    assert DeviceTruth.load().content_hash() == t.content_hash()
    for bad, words in (
        ("device:colour=1", "unknown option"),
        ("device:sigma=abc", "needs a number"),
        ("device:sigma=-1", "sigma must be >= 0"),
        ("device:spike_lo=3,spike_hi=2", "spike_lo <= spike_hi"),
    ):
        with pytest.raises(InputError, match=words):
            device_truth(bad.partition(":")[2])
    with pytest.raises(InputError, match="expected analytic"):
        load_truth("gpu")


def test_a_broken_profile_file_is_one_line(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not a device truth file"):
        DeviceTruth.load(bad)
    bad.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(InputError, match="schema"):
        DeviceTruth.load(bad)
