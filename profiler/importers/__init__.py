"""Importers: iteration-level samples composed from public per-operator GPU profiles.

``import_profile("aiconfigurator" | "vidur", path, shape, tp, grid, comm)`` returns samples rows
(medians, ``rep = 0``, ``energy_j`` null) on a design grid plus the provenance
that says where they came from and what was interpolated or approximated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from servecal.costmodels.errors import InputError
from servecal.profiler.design import GPU_GRID, Grid, design_points
from servecal.profiler.importers.aiconfigurator import AiConfiguratorSource
from servecal.profiler.importers.collective import CommOptions
from servecal.profiler.importers.compose import compose
from servecal.profiler.importers.interp import ExtrapolationLog
from servecal.profiler.importers.vidur import VidurSource
from servecal.profiler.shapes import ModelShape

SOURCES = {"aiconfigurator": AiConfiguratorSource, "vidur": VidurSource}


def import_profile(
    kind: str,
    path: str | Path,
    shape: ModelShape,
    tp: int = 1,
    grid: Grid | None = None,
    comm: CommOptions | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Composed samples for ``shape`` at TP ``tp`` on ``grid`` (default: the GPU grid).

    ``comm`` says how the tensor-parallel all-reduces are priced (default: from the
    profile's collective table, backend ``auto``; a missing table at ``tp > 1`` is
    an :class:`InputError` unless ``comm.enabled`` is False)."""
    if kind not in SOURCES:
        raise InputError(f"unknown profile kind {kind!r}; choose {', '.join(SOURCES)}")
    if tp < 1:
        raise InputError(f"--tp must be >= 1, got {tp}")
    if not Path(path).exists():
        raise InputError(f"{path}: no such file or folder")
    log = ExtrapolationLog()
    source = SOURCES[kind](path, shape, tp, log, comm or CommOptions())
    grid = grid or GPU_GRID
    points = design_points(grid, np.random.default_rng(0))
    frame = compose(source, shape, points)
    provenance = {
        "source": f"servecal import {kind}",
        **source.provenance(),
        "model": shape.name,
        "model_shape": shape.to_dict(),
        "model_hash": shape.hash,
        "tp": tp,
        "dtype": "bfloat16",
        "rows": "medians (rep 0): P50 only; the profile carries no tail",
        "grid": grid.to_dict(),
        "extrapolated_reads": log.count,
    }
    return frame, provenance
