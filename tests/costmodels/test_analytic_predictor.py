"""The docs/spec.md §1 formula as a predictor, and the shared binary search."""

import numpy as np
import pytest

from servecal.costmodels import AnalyticPredictor, Predictor, largest_fitting


def test_seed_worked_example() -> None:
    p = AnalyticPredictor()
    assert p.predict(4, 1350) == pytest.approx(9.97)
    assert p.predict(40, 0) == pytest.approx(3.45)
    assert p.max_chunk(4, 0, 0, 10.0, 4096) == 1354  # floor((10 - 1.87) / 0.006)


def test_is_a_predictor_and_vectorises() -> None:
    p = AnalyticPredictor()
    assert isinstance(p, Predictor)
    n = np.array([0, 4, 40])
    c = np.array([10, 0, 100])
    expected = [p.predict(int(a), int(b)) for a, b in zip(n, c, strict=True)]
    np.testing.assert_allclose(p.predict(n, c), expected)
    assert p.margin(n, c).shape == (3,)


def test_max_chunk_matches_brute_force() -> None:
    rng = np.random.default_rng(0)
    p = AnalyticPredictor(sigma=0.1)
    for _ in range(200):
        n = int(rng.integers(0, 300))
        budget = float(rng.uniform(0, 30))
        limit = int(rng.integers(0, 3000))
        brute = max(
            [c for c in range(1, limit + 1) if p.predict(n, c, q=0.99) <= budget], default=0
        )
        assert p.max_chunk(n, 0, 0, budget, limit) == brute


def test_quantiles_are_ordered_with_noise() -> None:
    p = AnalyticPredictor(sigma=0.2)
    assert p.predict(8, 256, q=0.5) < p.predict(8, 256, q=0.99)
    with pytest.raises(ValueError):
        p.predict(8, 256, q=1.0)


def test_rejects_bad_coefficients() -> None:
    with pytest.raises(ValueError):
        AnalyticPredictor(prefill_per_token=0)
    with pytest.raises(ValueError):
        AnalyticPredictor(sigma=-1)


def test_largest_fitting_edges() -> None:
    assert largest_fitting(lambda c: c <= 7, 100) == 7
    assert largest_fitting(lambda c: True, 100) == 100
    assert largest_fitting(lambda c: False, 100) == 0
    assert largest_fitting(lambda c: True, 0) == 0
