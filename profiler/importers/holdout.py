"""Fit the host-overhead model on half of the measured configurations, test on the rest.

Used by ``benchmarks/eager_overhead.py`` and its test: the composed GPU time of each
measured step, then, for each half in turn, :func:`~.overhead.fit_overhead` on that
half and the relative errors on both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from servecal.profiler.design import Point
from servecal.profiler.importers.compose import StepComposition, compose_row
from servecal.profiler.importers.overhead import (
    HostOverhead,
    fit_overhead,
    relative_errors,
    requests_in_batch,
)
from servecal.profiler.importers.published import halves
from servecal.profiler.shapes import ModelShape


def gpu_ms(
    source: Any,
    shape: ModelShape,
    steps: pd.DataFrame,
    eager: StepComposition = StepComposition("separate"),  # noqa: B008 (frozen, immutable)
) -> np.ndarray:
    """``[steps, 2]``: the composed (GPU-only) time of each step and its attention share,
    composed as an eager engine runs it (a kernel per attention part; ``eager`` may add
    the engine's padding)."""
    out = []
    for r in steps.itertuples(index=False):
        point = Point(int(r.n_decode), int(r.chunk), int(r.ctx), 0)
        row = compose_row(source, shape, point, eager)
        out.append((row["ms"], row["op_attn_decode_ms"] + row["op_attn_prefill_ms"]))
    return np.array(out)


@dataclass(frozen=True)
class HalfResult:
    """One direction of the split: the model fitted on ``fit_half`` and its errors."""

    fit_half: int
    model: HostOverhead
    errors: pd.DataFrame  # set, config, half, gpu_error, error

    def median(self, on_fit_half: bool, set_name: str | None = None) -> float:
        rows = self.errors[(self.errors["half"] == self.fit_half) == on_fit_half]
        if set_name is not None:
            rows = rows[rows["set"] == set_name]
        return float(rows["error"].median())


def holdout(steps: pd.DataFrame, composed: np.ndarray, fit_scale: bool = True) -> list[HalfResult]:
    """Both directions of the configuration split (:func:`~.published.halves`);
    ``composed`` as :func:`gpu_ms` returns it."""
    gpu, attention = composed[:, 0], composed[:, 1]
    half = halves(steps).to_numpy()
    n = requests_in_batch(steps["n_decode"], steps["chunk"])
    measured = steps["ms"].to_numpy(dtype=float)
    results = []
    for fit_half in (0, 1):
        on = half == fit_half
        model = fit_overhead(gpu[on], n[on], measured[on], attention[on], fit_scale)
        errors = pd.DataFrame(
            {
                "set": steps["set"].to_numpy(),
                "config": steps["config"].to_numpy(),
                "half": half,
                "gpu_error": relative_errors(gpu, measured),
                "error": relative_errors(model.step_ms(gpu, n, attention), measured),
            }
        )
        results.append(HalfResult(fit_half, model, errors))
    return results
