"""Truth models of the simulated executor: formula, noise, spikes, bootstrap, drift."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from servecal.costmodels import AnalyticPredictor, InputError
from servecal.sched.experiment.models import load_truth
from servecal.sched.truth import AnalyticTruth, Drift, SampledTruth, parse_drift

T = AnalyticPredictor()


def _draws(executor, n=20000, shape=(8, 512)):
    return np.array([executor.execute(*shape, 0.0, 0.0, 0.0)[0] for _ in range(n)])


def test_deterministic_truth_is_the_formula():
    ex = AnalyticTruth().executor(np.random.default_rng(0))
    for n, c in [(0, 1), (4, 1350), (40, 0), (300, 4096)]:
        assert ex.execute(n, c, 100.0, 0.0, 5.0) == (pytest.approx(T.predict(n, c)), None)
    assert ex.energy_source == "none"


def test_lognormal_noise_matches_its_oracle_quantiles():
    truth = AnalyticTruth(sigma=0.2)
    d = _draws(truth.executor(np.random.default_rng(1)))
    oracle = truth.oracle()
    assert np.median(d) == pytest.approx(oracle.predict(8, 512, q=0.5), rel=0.02)
    assert np.mean(d <= oracle.predict(8, 512, q=0.99)) == pytest.approx(0.99, abs=0.003)


def test_spikes_are_rare_and_scaled():
    truth = AnalyticTruth(spike_prob=0.01, spike_factor=4.0)
    d = _draws(truth.executor(np.random.default_rng(2)))
    base = T.predict(8, 512)
    assert set(np.round(d / base, 9)) == {1.0, 4.0}
    assert np.mean(d > base) == pytest.approx(0.01, abs=0.003)


def test_power_model_gives_energy():
    ex = AnalyticTruth(power_w=400.0).executor(np.random.default_rng(0))
    ms, joules = ex.execute(4, 100, 0.0, 0.0, 0.0)
    assert joules == pytest.approx(0.4 * ms) and ex.energy_source == "model"


def test_drift_applies_from_its_time_and_in_its_region():
    drift = Drift(at_ms=1000.0, factor=1.5, c_range=(256, 4096))
    ex = AnalyticTruth().executor(np.random.default_rng(0), drift)
    assert ex.execute(4, 512, 0, 0, 999.0)[0] == pytest.approx(T.predict(4, 512))
    assert ex.execute(4, 512, 0, 0, 1000.0)[0] == pytest.approx(1.5 * T.predict(4, 512))
    assert ex.execute(4, 100, 0, 0, 2000.0)[0] == pytest.approx(T.predict(4, 100))


def test_parse_drift():
    assert parse_drift("60s:1.10") == Drift(60_000.0, 1.10)
    assert parse_drift("500ms:1.3:n=0-64,c=512-4096") == Drift(500.0, 1.3, (0, 64), (512, 4096))
    assert parse_drift("2:0.9:c=1-8") == Drift(2000.0, 0.9, None, (1, 8))
    # a share of the run: the same point of the run at any rate (a max-goodput search)
    share = parse_drift("30%:1.15")
    assert share.at_share == pytest.approx(0.3) and share.resolved(10_000.0) == Drift(3000.0, 1.15)
    assert not share.resolved(10_000.0).applies(1, 0, 2999.0)
    assert parse_drift("60s:1.1").resolved(1.0) == Drift(60_000.0, 1.1)
    for bad in ("60s", "x:1.1", "60s:-1", "60s:1.1:q=1-2", "60s:1.1:n=5-1", "120%:1.1", "x%:1"):
        with pytest.raises(InputError, match="--drift"):
            parse_drift(bad)


def test_truths_resolve_by_name():
    assert load_truth("analytic") == AnalyticTruth()
    t = load_truth("analytic:sigma=0.1,spike_prob=0.001,spike_factor=3,power_w=300")
    assert (t.sigma, t.spike_prob, t.spike_factor, t.power_w) == (0.1, 0.001, 3.0, 300.0)
    for bad in ("numeric", "analytic:foo=1", "analytic:sigma=x", "analytic:sigma=-1"):
        with pytest.raises(InputError, match="--truth"):
            load_truth(bad)


def _samples(tmp_path, energy=True):
    rows = []
    for n, c, ms in [(0, 512, 4.0), (64, 0, 5.0), (64, 512, 9.0)]:
        for rep, jitter in enumerate((0.9, 1.0, 1.1)):
            rows.append((n, c, 0, 0, ms * jitter, ms * 0.3 if energy else None, rep))
    frame = pd.DataFrame(
        rows, columns=["n_decode", "chunk", "ctx", "prefix", "ms", "energy_j", "rep"]
    )
    path = tmp_path / "samples.csv"
    frame.to_csv(path, index=False)
    return path


def test_bootstrap_draws_measured_rows_at_the_nearest_point(tmp_path):
    truth = SampledTruth.load(_samples(tmp_path))
    ex = truth.executor(np.random.default_rng(0))
    assert ex.energy_source == "samples"
    seen = {ex.execute(60, 480, 0.0, 0.0, 0.0) for _ in range(200)}
    assert {round(ms, 6) for ms, _ in seen} == {8.1, 9.0, 9.9}
    assert all(e == pytest.approx(ms / 9.0 * 2.7, rel=0.2) for ms, e in seen)
    ms, _ = ex.execute(0, 600, 0.0, 0.0, 0.0)
    assert round(ms, 6) in {3.6, 4.0, 4.4}


def test_bootstrap_without_energy_and_bad_files(tmp_path):
    ex = SampledTruth.load(_samples(tmp_path, energy=False)).executor(np.random.default_rng(0))
    assert ex.execute(64, 0, 0.0, 0.0, 0.0)[1] is None and ex.energy_source == "none"
    bad = tmp_path / "bad.csv"
    bad.write_text("n_decode,chunk\n1,2\n")
    with pytest.raises(InputError):
        load_truth(f"samples:{bad}")
    assert math.isfinite(ex.execute(1, 1, 0.0, 0.0, 0.0)[0])


def test_nearest_point_is_the_brute_force_nearest_in_log1p_space():
    """Per-axis integer thresholds give exactly the argmin over all points (measured
    cells), and unmeasured cells fall back to that scan."""
    from servecal.sched.truth import NearestPoint

    rng = np.random.default_rng(3)
    axes = ([0, 1, 8, 64, 256], [0, 128, 512, 2048, 8192], [0, 1000, 4000, 32000], [0, 512])
    grid = np.array(np.meshgrid(*axes, indexing="ij")).reshape(4, -1).T
    points = grid[rng.random(len(grid)) < 0.7]  # some cells were never measured
    nearest = NearestPoint(points)
    logs = np.log1p(points.astype(float))
    shapes = [tuple(int(rng.integers(0, 2 * max(a) + 2)) for a in axes) for _ in range(3000)]
    shapes += [tuple(int(v) for v in p) for p in points]  # on the grid itself
    for shape in shapes:
        want = np.argmin(((logs - np.log1p(np.asarray(shape, float))) ** 2).sum(axis=1))
        got = nearest.index(*shape)
        assert np.allclose(logs[got], logs[want]) or np.isclose(
            ((logs[got] - np.log1p(shape)) ** 2).sum(), ((logs[want] - np.log1p(shape)) ** 2).sum()
        ), shape
