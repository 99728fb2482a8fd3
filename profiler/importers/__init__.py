"""Importers: iteration-level samples composed from public per-operator GPU profiles.

``import_profile(kind, path, shape, tp, grid, comm)`` returns samples rows
(medians, ``rep = 0``, ``energy_j`` null) on a design grid plus the provenance
that says where they came from and what was interpolated or approximated. ``kind``
is a name of :data:`~servecal.profiler.importer_registry.IMPORTERS`
(``aiconfigurator``, ``vidur``) or a user's ``module:Class`` (docs/plugins.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from servecal.costmodels.errors import InputError
from servecal.profiler.design import GPU_GRID, Grid, design_points
from servecal.profiler.importer_registry import IMPORTERS
from servecal.profiler.importers.collective import CommOptions
from servecal.profiler.importers.compose import compose
from servecal.profiler.importers.interp import ExtrapolationLog
from servecal.profiler.shapes import ModelShape

#: Names of the built-in importers (``servecal plugins importer`` lists them).
SOURCES = IMPORTERS.names()


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
    if kind not in IMPORTERS and ":" not in kind:
        raise InputError(f"unknown profile kind {kind!r}; choose {IMPORTERS.usages()}")
    if tp < 1:
        raise InputError(f"--tp must be >= 1, got {tp}")
    if not Path(path).exists():
        raise InputError(f"{path}: no such file or folder")
    log = ExtrapolationLog()
    source = IMPORTERS.call(kind, path, shape, tp, log, comm or CommOptions())
    grid = grid or GPU_GRID
    points = design_points(grid, np.random.default_rng(0))
    try:
        frame = compose(source, shape, points)
        source_provenance = source.provenance()
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a user's importer (module:Class), any failure
        if kind in IMPORTERS:
            raise
        raise InputError(f"servecal import {kind}: {type(exc).__name__}: {exc}") from None
    provenance = {
        "source": f"servecal import {kind}",
        **source_provenance,
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
