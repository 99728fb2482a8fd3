"""The ``fitted`` predictors: cost tables fitted on samples of the run's truth.

What a team does before deploying a scheduler: calibrate the device on a grid, fit a
table (``fit_cost_table``: per-point quantiles, K-fold conformal margin) and plan with
it. Here the "device" is the simulated truth, sampled on :data:`FIT_GRID` with
:data:`FIT_REPEATS` repeats per point from a seed no run uses (runs draw from
``SeedSequence(k)`` for small ``k``; the calibration from ``SeedSequence(FIT_ENTROPY)``).

Two names (docs/truth.md, "Grid margin vs probe margin"):

* ``fitted-grid``: that table as ``fit_cost_table`` writes it. Its margin is set on
  out-of-fold predictions *of grid points*, so it never sees the error between them;
  on a device with GEMM steps, whose edges sit just above the power-of-two chunk
  sizes of the grid, it under-covers the off-grid shapes a scheduler asks about.
* ``fitted`` (the default): the same quantiles, with the margin recalibrated
  (split conformal, :func:`probe_margin`) on :data:`FIT_PROBES` iterations at random
  off-grid shapes over the grid's domain, drawn from the calibration's own seed.

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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from servecal.costmodels.table import CostTable
from servecal.util.errors import InputError

if TYPE_CHECKING:  # frames only while fitting: loading a fitted table imports no pandas
    import pandas as pd

#: The profiler's GPU grid (profiler/design.py), extended to what schedulers visit:
#: overloaded decode batches (512), full prefills of 16k prompts and prefill batches (the
#: operator driver batches multislo prompts of up to 16k tokens), 16k contexts/prefixes
#: (multislo), and ctx 0 (prefill-only iterations) so those are not counted as clamped.
FIT_GRID: dict[str, tuple[int, ...]] = {
    "n_decode": (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
    "chunk": (0, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384),
    "ctx": (0, 128, 512, 1024, 2048, 4096, 8192, 16384),
    "prefix": (0, 1024, 4096, 8192, 16384),
}
FIT_REPEATS = 20  # the profiler's default repeats per point
FIT_ENTROPY = 20261216  # SeedSequence entropy of the calibration draws (fixed: reproducible)
FIT_PROBES = 4000  # off-grid shapes (one iteration each) the ``fitted`` margin is set on
#: Bump when the fitting recipe changes, so cached tables are rebuilt.
FIT_RECIPE = "fit_cost_table(model=table, holdout=0.2, quantiles=(0.5, 0.99)) v1"
#: predictor name → whether its margin is recalibrated on off-grid probes
VARIANTS = {"fitted": True, "fitted-grid": False}
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
    """sha256 of everything the fitted tables depend on: the truth's parameters, the
    grid, the repeats, the probes, the seed and the recipe."""
    doc = {
        "truth": truth.describe(),
        "grid": {k: list(v) for k, v in FIT_GRID.items()},
        "probes": FIT_PROBES,
        "repeats": FIT_REPEATS,
        "entropy": FIT_ENTROPY,
        "recipe": FIT_RECIPE,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def probe_points(
    rng: np.random.Generator, size: int, upper: Mapping[str, int] | None = None
) -> pd.DataFrame:
    """Random shapes up to ``upper`` on each axis (default: :data:`FIT_GRID`'s domain),
    sizes log-uniform (a tenth with no decodes, a tenth of the rest with no chunk),
    ``ctx`` and ``prefix`` uniform."""
    hi = dict(upper) if upper is not None else {k: v[-1] for k, v in FIT_GRID.items()}

    def log_uniform(top: int) -> np.ndarray:
        return np.floor(np.exp(rng.uniform(0.0, np.log(top + 1), size))).astype(np.int64)

    n = np.where(rng.random(size) < 0.1, 0, log_uniform(hi["n_decode"]))
    c = np.where((rng.random(size) < 0.1) & (n > 0), 0, log_uniform(hi["chunk"]))
    c = np.where((n == 0) & (c == 0), 1, c)
    ctx = np.where(n > 0, rng.integers(1, hi["ctx"] + 1, size), 0)
    prefix = np.where(c > 0, rng.integers(0, hi["prefix"] + 1, size), 0)
    import pandas as pd

    return pd.DataFrame({"n_decode": n, "chunk": c, "ctx": ctx, "prefix": prefix})


def probe_margin(table: CostTable, truth: SamplableTruth) -> CostTable:
    """``table`` with its margin set by split conformal on :data:`FIT_PROBES` iterations at
    off-grid shapes (seed: the calibration's, stream 1): ``rho`` = the
    ``⌈(n+1)·tail⌉``-th smallest ``ms / P_tail − 1``."""
    from servecal.costmodels.conformal import conformal_rho

    tail = table.tail
    if tail is None:
        raise InputError("--predictor fitted: the table has no tail quantile to bound")
    rng = np.random.default_rng(np.random.SeedSequence(FIT_ENTROPY, spawn_key=(1,)))
    rows = truth.draw(probe_points(rng, FIT_PROBES), 1, rng)
    query = [rows[c].to_numpy(dtype=float) for c in ("n_decode", "chunk", "ctx", "prefix")]
    p_tail, _ = table.lookup(tail, *query)
    rho = conformal_rho(rows["ms"].to_numpy(dtype=float) / p_tail - 1.0, tail)
    doc = table.to_json()
    doc.pop("content_hash", None)  # a new table (another margin): hashed anew when saved
    doc["margin"] = {
        **doc["margin"],
        "rho": rho,
        "validated_coverage": None,
        "calibration_points": FIT_PROBES,
        "calibration_rows": FIT_PROBES,
        "score": "ms / p_tail - 1 (split conformal, off-grid probes)",
    }
    doc["model"] = {
        **doc["model"],
        "margin_recalibrated": f"{FIT_PROBES} off-grid probes, grid rho "
        f"{table.margin_info.rho if table.margin_info else None}",
    }
    return CostTable.from_json(doc, "fitted table")


def calibration_samples(truth: SamplableTruth) -> pd.DataFrame:
    """:data:`FIT_REPEATS` draws per point of :data:`FIT_GRID`, from the calibration seed."""
    rng = np.random.default_rng(np.random.SeedSequence(FIT_ENTROPY))
    return truth.draw(calibration_points(), FIT_REPEATS, rng)


def fit_table(truth: SamplableTruth, progress: Callable[[str], None] | None = None) -> CostTable:
    """Fit the table for ``truth`` (seconds: ~75k rows, 5 folds)."""
    from servecal.costmodels.fit import fit_cost_table

    provenance = {
        "source": "servecal.sched.fitted_table (samples of the simulated truth)",
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


def fitted_predictor(truth: Any, name: str = "fitted") -> CostTable:
    """The ``name`` table (:data:`VARIANTS`) for ``truth``: from the grid table shipped
    for it, else a cached one, else one fitted now and cached."""
    if name not in VARIANTS:
        raise InputError(f"--predictor {name}: expected one of {', '.join(VARIANTS)}")
    if not (hasattr(truth, "describe") and hasattr(truth, "draw")):
        raise InputError(
            f"--predictor {name} (the default) fits a table on new samples of the truth, "
            "and this truth cannot draw any: use --truth device[:...], or give --predictor "
            "TABLE.json (or oracle)"
        )
    key = fit_key(truth)
    table = _matching(SHIPPED_PATH, key)
    if table is None:
        cached = _cache_dir() / f"{key[:16]}.json"
        table = _matching(cached, key)
        if table is None:
            table = fit_table(truth)
            table.save(cached)
    return probe_margin(table, truth) if VARIANTS[name] else table


def fitted(arg: str, truth: Any) -> CostTable:
    """``--predictor fitted``: the table fitted on samples of the run's truth, its margin
    set on off-grid probes (the default predictor)."""
    if arg:
        raise InputError(f"--predictor fitted:{arg}: fitted takes no argument")
    return fitted_predictor(truth, "fitted")


def fitted_grid(arg: str, truth: Any) -> CostTable:
    """``--predictor fitted-grid``: that table with the margin ``fit`` sets on grid points."""
    if arg:
        raise InputError(f"--predictor fitted-grid:{arg}: fitted-grid takes no argument")
    return fitted_predictor(truth, "fitted-grid")
