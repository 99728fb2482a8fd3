"""Noise profiles: robust to a shift (scale) and to spikes, honest about the centre."""

import numpy as np
import pytest

from servecal.costmodels import AnalyticPredictor
from servecal.costmodels.drift.profile import Z99, NoiseProfile


def test_scale_is_the_log_sigma_and_ignores_shift_and_spikes() -> None:
    rng = np.random.default_rng(1)
    r = 0.08 * rng.standard_normal(4000)
    r[rng.random(4000) < 0.01] += 1.0
    p = NoiseProfile.from_residuals(r)
    shifted = NoiseProfile.from_residuals(r + 0.1, center=0.0)
    assert p.scale == pytest.approx(0.08, rel=0.08)
    assert shifted.scale == pytest.approx(p.scale)
    assert shifted.center == 0.0
    assert p.center == pytest.approx(0.0, abs=0.01)


def test_standardised_residuals_have_unit_spread() -> None:
    rng = np.random.default_rng(2)
    r = 0.1 * rng.standard_normal(5000)
    p = NoiseProfile.from_residuals(r)
    u = p.standardise(r)
    assert abs(float(np.mean(u))) < 1e-9
    assert float(np.std(u)) == pytest.approx(1.0)
    assert p.standardise(float(r[3])) == pytest.approx(float(u[3]))
    assert p.standardise(10.0) == pytest.approx(float(p.standardise(np.array([10.0]))[0]))


def test_too_few_residuals_is_refused() -> None:
    with pytest.raises(ValueError, match="at least"):
        NoiseProfile.from_residuals([0.0, 0.1, -0.1])


def test_profile_from_a_predictor_reads_its_p99_spread() -> None:
    pred = AnalyticPredictor(sigma=0.07)
    p = NoiseProfile.from_predictor(pred, [(4, 256, 0, 0), (32, 0, 0, 0)])
    assert p.scale == pytest.approx(0.07)
    assert abs(Z99 - 2.3263) < 1e-4
