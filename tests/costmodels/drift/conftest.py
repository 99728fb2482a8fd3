"""Synthetic iteration streams for the drift tests (log-normal noise with rare stalls)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from servecal.costmodels.drift import DriftConfig, DriftMonitor, NoiseProfile

SIGMA = 0.1
SPIKE_P = 0.005


def noise(rng: np.random.Generator, n: int, spike_p: float = SPIKE_P) -> np.ndarray:
    x = np.exp(SIGMA * rng.standard_normal(n))
    s = rng.random(n) < spike_p
    x[s] *= rng.uniform(1.5, 3.0, int(s.sum()))
    return x


@pytest.fixture(scope="session")
def draw() -> Callable[..., np.ndarray]:
    """``draw(rng, n, spike_p)``: actual/P50 ratios of the synthetic truth."""
    return noise


@pytest.fixture(scope="session")
def profile() -> NoiseProfile:
    rng = np.random.default_rng(123)
    return NoiseProfile.from_residuals(np.log(noise(rng, 3000)))


@pytest.fixture(scope="session")
def p99_ratio() -> float:
    return float(np.quantile(noise(np.random.default_rng(9), 400_000), 0.99))


@pytest.fixture(scope="session")
def config() -> DriftConfig:
    return DriftConfig(false_alarm_every=1e6)


Feed = Callable[..., DriftMonitor]


@pytest.fixture
def feed(profile: NoiseProfile, config: DriftConfig, p99_ratio: float) -> Feed:
    """Run a monitor over ``ratios`` (actual/P50) at given (n_decode, chunk) points."""

    def run(ratios: np.ndarray, n_decode: np.ndarray, chunk: np.ndarray) -> DriftMonitor:
        mon = DriftMonitor(profile, config)
        for i, (x, n, c) in enumerate(zip(ratios, n_decode, chunk, strict=True)):
            p50 = 2.0 + 0.05 * n + 0.006 * c
            mon.observe(
                {
                    "index": i,
                    "start_ms": 10.0 * i,
                    "n_decode": int(n),
                    "chunk": int(c),
                    "pred_p50": p50,
                    "pred_p99": p50 * p99_ratio,
                    "margin": 0.0,
                    "actual_ms": p50 * float(x),
                }
            )
        return mon

    return run
