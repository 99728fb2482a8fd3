"""A user's own calibration, as a truth: a coarse grid's draws replayed nearest-point.

A team calibrates a few values per axis (``servecal calibrate``), and the table
interpolates between them; the device steps where the table is smooth. This module
builds that pair from any samplable truth: ``repeats`` draws per point of ``grid``
from one seed, replayed at the nearest grid point (``samples:PATH``, a step
function), and the table fitted (``fit_cost_table(model="table")``, the margin it sets,
as ``calibrate`` writes it) on draws of the same grid from *another* seed
(``table:PATH``). The robustness benchmark's coarse truths and the tests use it.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd


def _draws(truth: object, points: pd.DataFrame, repeats: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    return truth.draw(points, repeats, rng)  # type: ignore[attr-defined]


def coarse_replay(
    spec: str,
    grid: Mapping[str, Sequence[int]],
    folder: Path,
    truth_seed: int,
    table_seed: int,
    repeats: int = 20,
) -> tuple[str, str]:
    """``(--truth, --predictor)`` of ``spec``'s coarse replay on ``grid``, written once
    under ``folder`` (``samples.parquet``, ``table.json``; reused when both exist)."""
    from servecal.costmodels.fit import fit_cost_table
    from servecal.costmodels.samples import write_samples
    from servecal.sched.experiment.models import load_truth
    from servecal.sched.fitted_table import calibration_points

    samples, table = folder / "samples.parquet", folder / "table.json"
    if not (samples.is_file() and table.is_file()):
        folder.mkdir(parents=True, exist_ok=True)
        source = load_truth(spec)
        points = calibration_points({k: tuple(v) for k, v in grid.items()})
        about = {"source": "servecal.sched.coarse_replay", "truth": spec, "repeats": repeats,
                 "grid": {k: list(v) for k, v in grid.items()}}  # fmt: skip
        rows = _draws(source, points, repeats, truth_seed)
        write_samples(rows, samples, {**about, "seed": truth_seed})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = fit_cost_table(
                _draws(source, points, repeats, table_seed),
                {**about, "seed": table_seed},
                model="table",
            )
        fit.table.save(table)
    return f"samples:{samples}", f"table:{table}"
