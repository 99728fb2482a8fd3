"""The ``fitted`` predictor: a cost table fitted on samples of the run's truth.

What a team does before deploying a scheduler: calibrate the device on a grid, fit a
table (``fit_cost_table``: per-point quantiles, K-fold conformal margin) and plan with
it. Here the "device" is the simulated truth, sampled on :data:`FIT_GRID` with
:data:`FIT_REPEATS` repeats per point from a seed no run uses (runs draw from
``SeedSequence(k)`` for small ``k``; the calibration from ``SeedSequence(FIT_ENTROPY)``).

The table for the shipped ``device`` truth is in the package
(``sched/data/device_a100_fitted.json``, written by ``scripts/fit_device_table.py``);
any other truth that can draw samples gets its table fitted once and cached under
``$SERVECAL_CACHE`` (default ``~/.cache/servecal``) by the content hash of everything
the fit depends on (:func:`fit_key`).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from servecal.costmodels.errors import InputError
from servecal.costmodels.table import CostTable

#: The profiler's GPU grid (profiler/design.py), extended to what schedulers visit:
#: overloaded decode batches (512), full prefills of 8k prompts, 16k contexts/prefixes
#: (multislo), and ctx 0 (prefill-only iterations) so those are not counted as clamped.
FIT_GRID: dict[str, tuple[int, ...]] = {
    "n_decode": (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
    "chunk": (0, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192),
    "ctx": (0, 128, 512, 1024, 2048, 4096, 8192, 16384),
    "prefix": (0, 1024, 4096, 8192, 16384),
}
FIT_REPEATS = 20  # the profiler's default repeats per point
FIT_ENTROPY = 20261216  # SeedSequence entropy of the calibration draws (issue 16)
#: Bump when the fitting recipe changes, so cached tables are rebuilt.
FIT_RECIPE = "fit_cost_table(model=table, holdout=0.2, quantiles=(0.5, 0.99)) v1"
SHIPPED_PATH = Path(__file__).resolve().parent / "data" / "device_a100_fitted.json"


class SamplableTruth(Protocol):
    """A truth that can describe itself and draw calibration samples."""

    def describe(self) -> dict[str, Any]: ...

    def draw(
        self, points: pd.DataFrame, repeats: int, rng: np.random.Generator
    ) -> pd.DataFrame: ...


def calibration_points(grid: dict[str, tuple[int, ...]] | None = None) -> pd.DataFrame:
    """The grid's points as the profiler designs them: ``ctx`` only at its first value
    when nothing decodes, ``prefix`` only at its first when nothing prefills."""
    from servecal.costmodels.synthetic import grid_points

    g = grid or FIT_GRID
    pts = grid_points(g["n_decode"], g["chunk"], g["ctx"], g["prefix"])
    keep = ((pts.n_decode > 0) | (pts.ctx == g["ctx"][0])) & (
        (pts.chunk > 0) | (pts.prefix == g["prefix"][0])
    )
    return pts[keep].reset_index(drop=True)


def fit_key(truth: SamplableTruth) -> str:
    """sha256 of everything the fitted table depends on: the truth's parameters, the
    grid, the repeats, the seed and the recipe."""
    doc = {
        "truth": truth.describe(),
        "grid": {k: list(v) for k, v in FIT_GRID.items()},
        "repeats": FIT_REPEATS,
        "entropy": FIT_ENTROPY,
        "recipe": FIT_RECIPE,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def calibration_samples(truth: SamplableTruth) -> pd.DataFrame:
    """:data:`FIT_REPEATS` draws per point of :data:`FIT_GRID`, from the calibration seed."""
    rng = np.random.default_rng(np.random.SeedSequence(FIT_ENTROPY))
    return truth.draw(calibration_points(), FIT_REPEATS, rng)


def fit_table(truth: SamplableTruth, progress: Callable[[str], None] | None = None) -> CostTable:
    """Fit the table for ``truth`` (seconds: ~75k rows, 5 folds)."""
    from servecal.costmodels.fit import fit_cost_table

    provenance = {
        "source": "servecal.sched.fitted (samples of the simulated truth)",
        "device_name": "simulated",
        "truth": truth.describe(),
        "fit_key": fit_key(truth),
        "calibration": f"{FIT_REPEATS} repeats per point, SeedSequence({FIT_ENTROPY})",
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fit_cost_table(
            calibration_samples(truth), provenance, model="table", progress=progress
        )
    return result.table


def _cache_dir() -> Path:
    return Path(os.environ.get("SERVECAL_CACHE", Path.home() / ".cache" / "servecal")) / "fitted"


def _matching(path: Path, key: str) -> CostTable | None:
    if not path.is_file():
        return None
    table = CostTable.load(path)
    return table if table.fingerprint.get("fit_key") == key else None


def fitted_predictor(truth: Any) -> CostTable:
    """The fitted table for ``truth``: the shipped one if it was fitted on this very
    truth, else a cached one, else fitted now and cached."""
    if not (hasattr(truth, "describe") and hasattr(truth, "draw")):
        raise InputError(
            "--predictor fitted: this truth cannot draw calibration samples; "
            "use --truth device[:...] or give a cost table JSON"
        )
    key = fit_key(truth)
    table = _matching(SHIPPED_PATH, key)
    if table is not None:
        return table
    cached = _cache_dir() / f"{key[:16]}.json"
    table = _matching(cached, key)
    if table is None:
        table = fit_table(truth)
        table.save(cached)
    return table
