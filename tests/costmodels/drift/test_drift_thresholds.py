"""Thresholds: the Markov-chain ARL agrees with theory, and h meets the false-alarm budget."""

import math

import numpy as np
import pytest

from servecal.costmodels.drift.profile import NoiseProfile
from servecal.costmodels.drift.thresholds import cusum_arl, cusum_threshold, derive_thresholds


def siegmund(k: float, h: float) -> float:
    b = h + 1.166
    return (math.exp(2 * k * b) - 2 * k * b - 1) / (2 * k * k)


@pytest.mark.parametrize(("k", "h"), [(0.25, 5.0), (0.5, 4.0), (0.25, 20.0)])
def test_markov_arl_matches_siegmund_for_normal_noise(k: float, h: float) -> None:
    atoms = np.asarray(NoiseProfile.lognormal(0.1).atoms)
    assert cusum_arl(atoms, k, h) == pytest.approx(siegmund(k, h), rel=0.1)


def test_threshold_reaches_the_budget_and_no_more() -> None:
    atoms = np.asarray(NoiseProfile.lognormal(0.1).atoms)
    h = cusum_threshold(atoms, 0.25, 1e6)
    assert cusum_arl(atoms, 0.25, h) >= 1e6
    assert cusum_arl(atoms, 0.25, 0.95 * h) < 1e6


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
