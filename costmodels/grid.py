"""Grid helpers for compiling predictors into cost tables (numpy only).

* :func:`choose_axes` picks the table's axis values from the samples;
* :func:`grid_features` lists every cell as a feature row;
* :func:`cell_index` maps queries to their round-up cell (the table's between rule);
* :func:`fill_holes` gives cells without data a value between their monotone bounds;
* :func:`make_monotone` projects a grid onto non-decreasing arrays along every axis.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from servecal.costmodels.table import AXES

#: Feature columns of the fitted models (the samples' point columns).
FEATURES = ("n_decode", "chunk", "ctx", "prefix")
#: An axis with more distinct values than this is thinned to quantile-spaced values.
MAX_AXIS_VALUES = 64
#: Axes thinned from the samples are thinned further, the longest first, until the
#: grid has at most this many cells. A scattered design (every point its own value on
#: every axis) would otherwise ask for 64⁴ ≈ 17 M cells: a table of hundreds of MB
#: that takes minutes to compile. Profiler grids (a few thousand cells) are untouched.
MAX_CELLS = 2**15


def thin_axis(values: np.ndarray, max_values: int = MAX_AXIS_VALUES) -> list[int]:
    """Distinct values if few, else ``max_values`` quantile-spaced ones (min and max kept)."""
    distinct = np.unique(values.astype(np.int64))
    if distinct.size <= max_values:
        return distinct.tolist()
    picks = np.quantile(distinct, np.linspace(0.0, 1.0, max_values), method="higher")
    return np.unique(np.concatenate([picks, distinct[[0, -1]]])).astype(np.int64).tolist()


def choose_axes(
    points: Mapping[str, np.ndarray],
    grid: Mapping[str, Sequence[int]] | None = None,
    max_cells: int = MAX_CELLS,
) -> dict[str, list[int]]:
    """Axis values per table axis: ``grid`` where given, else thinned from ``points``
    (at most :data:`MAX_AXIS_VALUES` per axis, and together at most ``max_cells`` cells:
    the longest thinned axis loses a value at a time; given axes are kept)."""
    axes: dict[str, list[int]] = {}
    for name in AXES:
        if grid is not None and name in grid:
            vals = sorted({int(v) for v in grid[name]})
            if not vals:
                raise ValueError(f"grid axis '{name}' is empty")
            axes[name] = vals
        else:
            axes[name] = thin_axis(np.asarray(points[name]))
    thinned = [a for a in AXES if grid is None or a not in grid]
    while np.prod([len(v) for v in axes.values()], dtype=float) > max_cells:
        longest = max(thinned, key=lambda a: len(axes[a]), default=None)
        if longest is None or len(axes[longest]) <= 2:
            break
        axes[longest] = thin_axis(np.asarray(points[longest]), len(axes[longest]) - 1)
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


def _line_estimates(
    arr: np.ndarray, coords: np.ndarray, axis: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per cell, along one axis line: (two-sided interpolation, one-sided extrapolation).

    Interpolates linearly between the nearest known cells below and above; where only
    one side is known, extrapolates from the two nearest known cells on that side
    with a non-negative slope (one known cell: its value). NaN where nothing is known.
    """
    a = np.moveaxis(arr, axis, -1)
    size = a.shape[-1]
    idx = np.broadcast_to(np.arange(size), a.shape)
    known = ~np.isnan(a)
    prev = np.maximum.accumulate(np.where(known, idx, -1), axis=-1)
    nxt = np.flip(np.minimum.accumulate(np.flip(np.where(known, idx, size), -1), -1), -1)

    def at(ix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        safe = np.clip(ix, 0, size - 1)
        return np.take_along_axis(a, safe, -1), coords[safe]

    x = coords[idx]
    vp, xp = at(prev)
    vn, xn = at(nxt)
    has_p, has_n = prev >= 0, nxt < size
    with np.errstate(invalid="ignore", divide="ignore"):
        two = np.where(
            has_p & has_n, vp + (vn - vp) * (x - xp) / np.where(xn > xp, xn - xp, 1), np.nan
        )
        # second known cell before prev / after next, for one-sided extrapolation
        prev2 = np.take_along_axis(prev, np.clip(prev - 1, 0, size - 1), -1)
        prev2 = np.where(prev >= 1, prev2, -1)
        nxt2 = np.take_along_axis(nxt, np.clip(nxt + 1, 0, size - 1), -1)
        nxt2 = np.where(nxt <= size - 2, nxt2, size)
        vp2, xp2 = at(prev2)
        vn2, xn2 = at(nxt2)
        up = vp + np.maximum(0, (vp - vp2) / (xp - xp2)) * (x - xp)
        up = np.where(prev2 >= 0, up, vp)
        down = vn - np.maximum(0, (vn2 - vn) / (xn2 - xn)) * (xn - x)
        down = np.where(nxt2 < size, np.maximum(down, 0.0), vn)
    one = np.where(has_p & ~has_n, up, np.where(has_n & ~has_p, down, np.nan))
    return np.moveaxis(two, -1, axis), np.moveaxis(one, -1, axis)


def fill_holes(arr: np.ndarray, axes: Mapping[str, Sequence[int]] | None = None) -> np.ndarray:
    """Give NaN cells values from the known cells along their axis lines.

    Each hole averages the linear interpolations along the axes where it has known
    neighbours on both sides; failing that, the one-sided linear extrapolations. On
    ``n_decode`` and ``chunk`` the cell at 0 is a different regime (no decode / no
    prefill launch), so lines do not reach across it. Holes with no known cell on
    any of their lines are filled in later rounds from the cells filled before; a
    round that reaches no hole (e.g. only n_decode = chunk = 0 is left) lets lines
    cross the boundary. Every cell is reached: the grid is connected by its lines.
    Needs one known cell.
    """
    if not (~np.isnan(arr)).any():
        raise ValueError("cannot fill a grid without any known cell")
    out = np.array(arr, dtype=float)
    cross = False  # cross the 0 regime boundary only when nothing else reaches a hole
    while np.isnan(out).any():
        est = _round_estimates(out, axes, cross)
        todo = np.isnan(out) & ~np.isnan(est)
        if not todo.any():
            cross = True
            continue
        out[todo] = est[todo]
        cross = False
    return out


def _round_estimates(
    arr: np.ndarray, axes: Mapping[str, Sequence[int]] | None, cross: bool
) -> np.ndarray:
    """One round of line estimates for every cell; ``cross`` lets a cell at value 0 of
    ``n_decode``/``chunk`` extrapolate from the > 0 side (a last resort)."""
    twos, ones = [], []
    for k, name in enumerate(AXES):
        coords = np.asarray(axes[name] if axes else range(arr.shape[k]), dtype=float)
        zero_regime = name in ("n_decode", "chunk") and coords[0] == 0 and coords.size > 1
        if zero_regime and not cross:
            two = np.full(arr.shape, np.nan)
            one = np.full(arr.shape, np.nan)
            rest = (slice(None),) * k + (slice(1, None),)
            two[rest], one[rest] = _line_estimates(arr[rest], coords[1:], k)
        else:
            two, one = _line_estimates(arr, coords, k)
        twos.append(two)
        ones.append(one)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices are expected
        est = np.nanmean(np.stack(twos), axis=0)
        return np.where(np.isnan(est), np.nanmean(np.stack(ones), axis=0), est)


def settle_empty_iteration(arr: np.ndarray, axes: Mapping[str, Sequence[int]]) -> np.ndarray:
    """Cells with ``n_decode = chunk = 0`` describe no iteration (never measured: samples
    need ``n_decode + chunk >= 1``); give them the smaller of their two nearest
    neighbours, so that filling them cannot push real cells up in :func:`make_monotone`."""
    n_ax, c_ax = AXES.index("n_decode"), AXES.index("chunk")
    if axes["n_decode"][0] != 0 or axes["chunk"][0] != 0:
        return arr
    if len(axes["n_decode"]) < 2 or len(axes["chunk"]) < 2:
        return arr
    out = arr.copy()
    a = np.moveaxis(out, (n_ax, c_ax), (0, 1))  # a view: (n, c, ctx, prefix)
    a[0, 0] = np.minimum(a[0, 1], a[1, 0])
    return out


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
