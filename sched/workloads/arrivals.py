"""Arrival processes: when requests come, as ms from the start of the run.

Both processes take the long-run mean ``rate`` (req/s) at call time, so one
workload definition serves every load level of a sweep. Generation stops after
``n_requests`` arrivals or at ``duration_s``, whichever comes first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from servecal.util.errors import InputError


def _check_extent(rate: float, n_requests: int | None, duration_s: float | None) -> None:
    # InputError (a ValueError): these numbers come straight from command-line flags.
    if not (rate > 0 and math.isfinite(rate)):
        raise InputError(f"rate must be a positive number of requests per second, got {rate}")
    if n_requests is None and duration_s is None:
        raise InputError("give n_requests or duration_s (or both)")
    if n_requests is not None and n_requests < 1:
        raise InputError(f"n_requests must be >= 1, got {n_requests}")
    if duration_s is not None and not duration_s > 0:
        raise InputError(f"duration_s must be > 0, got {duration_s}")


@dataclass(frozen=True)
class PoissonArrivals:
    """Exponential inter-arrival gaps with mean ``1/rate``; the first arrival is one gap in."""

    def times_ms(
        self,
        rate: float,
        rng: np.random.Generator,
        n_requests: int | None = None,
        duration_s: float | None = None,
    ) -> np.ndarray:
        _check_extent(rate, n_requests, duration_s)
        horizon_ms = math.inf if duration_s is None else duration_s * 1000.0
        if n_requests is None:
            # Draw in blocks until the horizon is passed; 20% headroom keeps it to one block.
            chunks, t_end = [], 0.0
            while t_end <= horizon_ms:
                block = max(16, int(rate * (horizon_ms - t_end) / 1000.0 * 1.2) + 16)
                t = t_end + np.cumsum(rng.exponential(1000.0 / rate, block))
                chunks.append(t)
                t_end = float(t[-1])
            times = np.concatenate(chunks)
        else:
            times = np.cumsum(rng.exponential(1000.0 / rate, n_requests))
        return times[times <= horizon_ms]


@dataclass(frozen=True)
class MarkovModulatedArrivals:
    """Two-state Markov-modulated Poisson process (MMPP-2) with mean rate ``rate``.

    The process alternates a *burst* state (Poisson at ``burst_factor · rate``) and a
    *calm* state; dwell times are exponential with means ``mean_burst_s`` and
    ``mean_calm_s``. The calm factor is derived so that the time-weighted mean rate
    is exactly ``rate``: ``calm_factor = (T_b + T_c − burst_factor · T_b) / T_c``.
    The first state is drawn from the stationary distribution.
    """

    burst_factor: float
    mean_burst_s: float
    mean_calm_s: float

    def __post_init__(self) -> None:
        if not (self.burst_factor > 1 and self.mean_burst_s > 0 and self.mean_calm_s > 0):
            raise ValueError("need burst_factor > 1 and positive mean dwell times")
        if not self.calm_factor > 0:
            raise ValueError(
                f"burst_factor {self.burst_factor} with these dwell times leaves no calm rate"
            )

    @property
    def calm_factor(self) -> float:
        tb, tc = self.mean_burst_s, self.mean_calm_s
        return (tb + tc - self.burst_factor * tb) / tc

    @property
    def burst_share(self) -> float:
        """Long-run fraction of time spent in the burst state."""
        return self.mean_burst_s / (self.mean_burst_s + self.mean_calm_s)

    def times_ms(
        self,
        rate: float,
        rng: np.random.Generator,
        n_requests: int | None = None,
        duration_s: float | None = None,
    ) -> np.ndarray:
        _check_extent(rate, n_requests, duration_s)
        horizon_ms = math.inf if duration_s is None else duration_s * 1000.0
        want = math.inf if n_requests is None else n_requests
        factors = (self.burst_factor, self.calm_factor)
        dwell_ms = (self.mean_burst_s * 1000.0, self.mean_calm_s * 1000.0)
        state = 0 if rng.random() < self.burst_share else 1
        t, got, segments = 0.0, 0, []
        while got < want and t <= horizon_ms:
            length = rng.exponential(dwell_ms[state])
            # Given the count, Poisson arrivals in a segment are uniform order statistics.
            k = rng.poisson(rate * factors[state] * length / 1000.0)
            seg = t + np.sort(rng.random(k)) * length
            segments.append(seg)
            got += k
            t += length
            state = 1 - state
        times = np.concatenate(segments) if segments else np.empty(0)
        times = times[times <= horizon_ms]
        return times if n_requests is None else times[:n_requests]


ArrivalProcess = PoissonArrivals | MarkovModulatedArrivals
