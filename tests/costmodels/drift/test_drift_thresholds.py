"""Thresholds: the exponential tilt of the increments, and h keeps the false-alarm budget."""

import math

import numpy as np
import pytest

from servecal.costmodels.drift.profile import NoiseProfile
from servecal.costmodels.drift.thresholds import cusum_threshold, derive_thresholds, tilt


def test_tilt_of_normal_increments_is_twice_k() -> None:
    atoms = np.asarray(NoiseProfile.lognormal(0.1).atoms)
    assert tilt(atoms - 0.25) == pytest.approx(0.5, rel=0.03)
    assert math.isinf(tilt(-np.ones(5)))
    with pytest.raises(ValueError, match="drift"):
        tilt(np.array([-1.0, 2.0]))


@pytest.mark.parametrize("noise", ["normal", "stalls"])
def test_threshold_keeps_the_run_length_between_false_alarms(noise: str) -> None:
    rng = np.random.default_rng(0)
    r = 0.1 * rng.standard_normal(20_000)
    if noise == "stalls":
        r[rng.random(r.size) < 0.03] += 1.0
    atoms = np.asarray(NoiseProfile.from_residuals(r).atoms)
    k, arl0 = 0.25, 300.0
    h = cusum_threshold(atoms, k, arl0)
    s = np.zeros(4000)
    first = np.full(s.size, -1)
    for t in range(6000):  # in control: increments drawn from the same atoms
        s = np.maximum(0.0, s + atoms[rng.integers(0, atoms.size, s.size)] - k)
        first[(s >= h) & (first < 0)] = t + 1
    first[first < 0] = 6000  # censored streams count as their horizon (a lower bound)
    assert first.mean() >= arl0
    assert first.mean() < 20 * arl0  # a bound, but not a useless one


def test_heavier_upper_tail_needs_a_higher_slowdown_threshold() -> None:
    rng = np.random.default_rng(0)
    clean = 0.1 * rng.standard_normal(5000)
    spiky = clean.copy()
    spiky[rng.random(5000) < 0.02] += 1.0  # 2% stalls: more upward mass after clipping
    kw = dict(min_shift=0.05, arl0=1e6, tail_p0=0.01, tail_ratio=2.0)
    th_clean = derive_thresholds(NoiseProfile.from_residuals(clean), **kw)
    th_spiky = derive_thresholds(NoiseProfile.from_residuals(spiky), **kw)
    assert th_spiky.h_up > th_clean.h_up
    assert th_clean.tail_hit == pytest.approx(math.log(2.0))
    assert th_clean.h_tail == pytest.approx(math.log(1e6))


def test_k_follows_min_shift_in_units_of_the_noise() -> None:
    kw = dict(arl0=1e5, tail_p0=0.01, tail_ratio=2.0)
    quiet = derive_thresholds(NoiseProfile.lognormal(0.2), min_shift=0.05, **kw)
    loud = derive_thresholds(NoiseProfile.lognormal(0.2), min_shift=0.2, **kw)
    assert loud.k_up > quiet.k_up
    assert quiet.k_up == pytest.approx(math.log(1.05) / (2 * 0.2), rel=0.05)
