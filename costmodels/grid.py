"""Grid helpers for compiling predictors into cost tables (numpy only).

* :func:`choose_axes` picks the table's axis values from the samples;
* :func:`grid_features` lists every cell as a feature row;
* :func:`cell_index` maps queries to their round-up cell (the table's between rule);
* :func:`fill_holes` gives cells without data a value between their monotone bounds;
* :func:`make_monotone` projects a grid onto non-decreasing arrays along every axis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from servecal.costmodels.table import AXES

#: Feature columns of the fitted models (the samples' point columns).
FEATURES = ("n_decode", "chunk", "ctx", "prefix")
#: An axis with more distinct values than this is thinned to quantile-spaced values.
MAX_AXIS_VALUES = 64


def thin_axis(values: np.ndarray, max_values: int = MAX_AXIS_VALUES) -> list[int]:
    """Distinct values if few, else ``max_values`` quantile-spaced ones (min and max kept)."""
    distinct = np.unique(values.astype(np.int64))
    if distinct.size <= max_values:
        return distinct.tolist()
    picks = np.quantile(distinct, np.linspace(0.0, 1.0, max_values), method="higher")
    return np.unique(np.concatenate([picks, distinct[[0, -1]]])).astype(np.int64).tolist()


def choose_axes(
    points: Mapping[str, np.ndarray], grid: Mapping[str, Sequence[int]] | None = None
) -> dict[str, list[int]]:
    """Axis values per table axis: ``grid`` where given, else thinned from ``points``."""
    axes: dict[str, list[int]] = {}
    for name in AXES:
        if grid is not None and name in grid:
            vals = sorted({int(v) for v in grid[name]})
            if not vals:
                raise ValueError(f"grid axis '{name}' is empty")
            axes[name] = vals
        else:
            axes[name] = thin_axis(np.asarray(points[name]))
    return axes


def grid_shape(axes: Mapping[str, Sequence[int]]) -> tuple[int, ...]:
    return tuple(len(axes[a]) for a in AXES)


def grid_features(axes: Mapping[str, Sequence[int]]) -> np.ndarray:
    """Every cell as a row of :data:`FEATURES`, in the table's C order over :data:`AXES`."""
    mesh = np.meshgrid(*(np.asarray(axes[a], dtype=float) for a in AXES), indexing="ij")
    cols = {a: m.reshape(-1) for a, m in zip(AXES, mesh, strict=True)}
    return np.column_stack([cols[f] for f in FEATURES])


def cell_index(axes: Mapping[str, Sequence[int]], X: np.ndarray) -> np.ndarray:
    """Flat round-up cell of each feature row (clamped at the edges), as the table answers."""
    flat = np.zeros(X.shape[0], dtype=np.int64)
    for a in AXES:
        ax = np.asarray(axes[a], dtype=float)
        i = np.searchsorted(ax, X[:, FEATURES.index(a)], side="left")
        flat = flat * ax.size + np.minimum(i, ax.size - 1)
    return flat


def _cummax_all(arr: np.ndarray) -> np.ndarray:
    for axis in range(arr.ndim):
        arr = np.maximum.accumulate(arr, axis=axis)
    return arr


def _rev_cummin_all(arr: np.ndarray) -> np.ndarray:
    for axis in range(arr.ndim):
        arr = np.flip(np.minimum.accumulate(np.flip(arr, axis=axis), axis=axis), axis=axis)
    return arr


def fill_holes(arr: np.ndarray) -> np.ndarray:
    """Give NaN cells the midpoint of their monotone bounds from the known cells.

    The lower bound of a hole is the largest known value it dominates on every axis,
    the upper bound the smallest known value dominating it; along a dense axis this is
    close to linear interpolation between the two neighbours. A hole with one bound
    takes that bound. Needs at least one known cell.
    """
    known = ~np.isnan(arr)
    if known.all():
        return arr.copy()
    if not known.any():
        raise ValueError("cannot fill a grid without any known cell")
    lower = _cummax_all(np.where(known, arr, -np.inf))
    upper = _rev_cummin_all(np.where(known, arr, np.inf))
    both = np.isfinite(lower) & np.isfinite(upper)
    fill = np.where(both, 0.5 * (lower + upper), np.where(np.isfinite(lower), lower, upper))
    return np.where(known, arr, fill)


def make_monotone(arr: np.ndarray) -> np.ndarray:
    """Non-decreasing along every axis: the midpoint of the smallest monotone majorant
    (cumulative max) and the largest monotone minorant (reverse cumulative min).

    Both envelopes are monotone, so their midpoint is; unlike the cumulative max alone
    it is not biased upwards by noise. A monotone input is returned unchanged.
    """
    arr = np.asarray(arr, dtype=float)
    return 0.5 * (_cummax_all(arr) + _rev_cummin_all(arr))


def uncross(values: dict[float, np.ndarray]) -> dict[float, np.ndarray]:
    """Make higher quantiles at least the lower ones, cell by cell (keeps monotonicity)."""
    out: dict[float, np.ndarray] = {}
    prev = None
    for q in sorted(values):
        cur = values[q] if prev is None else np.maximum(values[q], prev)
        out[q] = prev = cur
    return out
