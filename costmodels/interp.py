"""Interpolation on a cost-table grid: the one routine behind every answer of a table.

``CostTable.predict`` (a scalar or arrays), ``margin``, ``energy``, the bound that
``max_chunk`` searches (:mod:`.chunk_search`) and the drift tests' median
(:mod:`.drift.reference`) all call :func:`value_at` (arrays: :func:`interpolate_arrays`,
the same arithmetic elementwise), so they agree bit for bit.

A grid has axes ``n_decode, ctx, prefix, chunk`` and its values stored flat in C
order over them (chunk last). A query lies in one grid box; on each axis it lies
``t`` of the way from a low grid value to a high one (:func:`position`). Its value
is the box's 16 corners blended in one fixed order:

1. *rows*: for each of the four (ctx, prefix) sides, the chunk row of the low
   ``n_decode`` side and that of the high one, ``R = 0 + (1 − t_n)·V_lo + t_n·V_hi``,
   at the chunk's two columns;
2. *chunk*: on each blended row, ``R[k] + t_c·(R[k+1] − R[k])``;
3. *sum*: over the four (ctx, prefix) sides, ctx outer, each weighted by
   ``w_ctx·w_prefix``, accumulated from 0.

On a grid value, or beyond the grid's edge (clamped: the edge's value), an axis's
``t`` is 0, so its high side adds exactly ``+0.0`` and a query on grid points reads
the stored value. The ``round_up`` rule is the same routine with every coordinate
moved up to the next grid value (``t = 0`` on every axis: the stored value of that
cell).

Why this keeps the table's promises: the grids are non-decreasing along every axis
and every weight is non-negative, so the value is non-decreasing in every
coordinate too. Along the chunk this holds exactly in floating point (each blended
row is non-decreasing, ``lo + t·(hi − lo)`` is monotone in ``t``, the weights are
fixed), which ``max_chunk``'s bisection relies on; along the other axes the weights
``1 − t, t`` trade off, so it holds to within rounding.

**Plain Python, no compiler.** A scalar query is a few dozen float operations and
three binary searches (:mod:`bisect`, in C) on Python floats and tuples: a few
microseconds. An earlier version compiled these routines with numba (~1-2 µs a call),
and every process that loaded a table paid ~1 s to import numba and load the compiled
code (7 s on the first run after an install), more than a 2,000-request simulation
takes (docs/results/2026-12-04-scale.md). That compiled search is kept for hot loops
only (:mod:`.hot_search`: a table's ``max_chunk`` switches to it after
:data:`.table.HOT_CALLS` calls). Arrays go through numpy, elementwise in the same
order of operations, so an array's answers are the scalar answers bit for bit.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

#: The clamped-query counts a state keeps (:attr:`State.counts`): the queries
#: counted, then per axis how many of them lay beyond it.
COUNTS = ("queries", "n_decode", "ctx", "prefix", "chunk")


class State:
    """A table's grids as the routines take them: the axes (tuples of floats), each
    grid flat in C order (a list of floats, numbered from 0 in the order packed), the
    rule, and the clamped-query counts (:data:`COUNTS`). Python floats, not numpy
    arrays: indexing a list is several times quicker than a numpy array from Python."""

    __slots__ = ("axes", "grids", "round_up", "counts", "width", "depth", "plane")

    def __init__(self, axes: Sequence[Sequence[float]], grids: Sequence[ArrayLike], round_up: bool):
        self.axes = tuple(tuple(float(v) for v in a) for a in axes)
        self.grids = [np.asarray(g, dtype=np.float64).reshape(-1).tolist() for g in grids]
        self.round_up = bool(round_up)
        self.counts = [0] * len(COUNTS)
        self.width, self.depth = len(self.axes[3]), len(self.axes[2])  # columns, prefix values
        self.plane = len(self.axes[1]) * self.depth * self.width  # values of one n_decode

    def __getstate__(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}

    def __setstate__(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, v)


def pack(axes: Sequence[Sequence[float]], grids: Sequence[ArrayLike], round_up: bool) -> State:
    """A table's :class:`State`: the axes, the grids by index, the rule, zero counts."""
    return State(axes, grids, round_up)


def position(axis: tuple[float, ...], x: float, round_up: bool) -> tuple[int, int, float]:
    """``(lo, hi, t)``: ``x`` lies ``t`` of the way from ``axis[lo]`` to ``axis[hi]``;
    beyond an edge (or NaN) that edge with ``t = 0``. ``round_up``: the first value at
    or above ``x`` (``bisect_left``; NaN: the first value), with ``t = 0``."""
    last = len(axis) - 1
    if round_up:
        i = min(bisect_left(axis, x), last)
        return i, i, 0.0
    lo = bisect_right(axis, x)  # the first value above x
    if lo == 0:
        return 0, 0, 0.0
    if lo > last:
        return last, last, 0.0
    low = axis[lo - 1]
    return lo - 1, lo, (x - low) / (axis[lo] - low)


#: A query's place in the grid apart from the chunk (:func:`box`): the weights of the
#: low and high ``n_decode`` sides, the flat distance between them, the flat offsets
#: of the four (ctx, prefix) rows' low sides (ctx outer) and their weights.
Box = tuple[float, float, int, int, int, int, int, float, float, float, float]


def box(state: State, n: float, ctx: float, prefix: float) -> Box:
    """Where ``(n_decode, ctx, prefix)`` lies: see :data:`Box`."""
    axes, round_up, depth, width = state.axes, state.round_up, state.depth, state.width
    n_lo, n_hi, tn = position(axes[0], n, round_up)
    y0, y1, u1 = position(axes[1], ctx, round_up)
    z0, z1, v1 = position(axes[2], prefix, round_up)
    u0, v0 = 1.0 - u1, 1.0 - v1
    base = n_lo * state.plane
    return (
        1.0 - tn,
        tn,
        (n_hi - n_lo) * state.plane,
        base + (y0 * depth + z0) * width,
        base + (y0 * depth + z1) * width,
        base + (y1 * depth + z0) * width,
        base + (y1 * depth + z1) * width,
        u0 * v0,
        u0 * v1,
        u1 * v0,
        u1 * v1,
    )


def value_at(state: State, g: int, where: Box, chunk: float) -> float:
    """Grid ``g``'s value at ``chunk`` in the query's :func:`box` (steps 1-3)."""
    v = state.grids[g]
    a, b, dn, p0, p1, p2, p3, w0, w1, w2, w3 = where
    k, j, t = position(state.axes[3], chunk, state.round_up)
    total = 0.0
    for row, w in ((p0, w0), (p1, w1), (p2, w2), (p3, w3)):
        lo = 0.0 + a * v[row + k] + b * v[row + dn + k]  # step 1, column k
        hi = 0.0 + a * v[row + j] + b * v[row + dn + j]  # step 1, column j
        total += w * (lo + t * (hi - lo))  # steps 2 and 3
    return total


def beyond(axis: tuple[float, ...], x: float) -> bool:
    """Whether ``x`` lies beyond the axis's edges (its answer is clamped there)."""
    return x < axis[0] or x > axis[-1]


def tally(state: State, n: bool, ctx: bool, prefix: bool, chunk: bool) -> None:
    """Count one clamped query (:data:`COUNTS`), on each axis it lies beyond."""
    counts = state.counts
    counts[0] += 1
    counts[1] += n
    counts[2] += ctx
    counts[3] += prefix
    counts[4] += chunk


def interpolate(state: State, g: int, n: float, ctx: float, prefix: float, chunk: float) -> float:
    """One query's value of grid ``g``, counted in the state if it lies beyond the grid."""
    n, ctx, prefix, chunk = float(n), float(ctx), float(prefix), float(chunk)
    axes = state.axes
    out_n, out_c = beyond(axes[0], n), beyond(axes[1], ctx)
    out_p, out_k = beyond(axes[2], prefix), beyond(axes[3], chunk)
    if out_n or out_c or out_p or out_k:
        tally(state, out_n, out_c, out_p, out_k)
    return value_at(state, g, box(state, n, ctx, prefix), chunk)


# ---------------------------------------------------------------- arrays (numpy)
def positions(axis: tuple[float, ...], x: np.ndarray, round_up: bool):
    """:func:`position` for each value of ``x``: arrays ``lo, hi, t``."""
    ax, last = np.asarray(axis), len(axis) - 1
    zero = np.zeros(x.shape)
    if round_up:
        i = np.where(np.isnan(x), 0, np.minimum(np.searchsorted(ax, x, side="left"), last))
        return i, i, zero
    lo = np.searchsorted(ax, x, side="right")  # NaN sorts last: the last value, as above
    inside = (lo > 0) & (lo <= last)
    hi = np.clip(lo, 1, max(last, 1))
    low = ax[hi - 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(inside, (x - low) / (ax[np.minimum(hi, last)] - low), zero)
    lo = np.where(inside, lo - 1, np.minimum(lo, last))
    return lo, np.where(inside, hi, lo), t


def interpolate_arrays(
    state: State, g: int, count: bool,
    n: ArrayLike, chunk: ArrayLike, ctx: ArrayLike, prefix: ArrayLike,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """:func:`interpolate` on any broadcastable shapes (counted only if ``count``):
    the values, and which were clamped, in the broadcast shape. The same arithmetic
    in the same order as :func:`box` and :func:`value_at`, elementwise."""
    xs = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (n, ctx, prefix, chunk)))
    shape, (n, ctx, prefix, chunk) = xs[0].shape, [x.reshape(-1) for x in xs]
    axes, round_up, depth, width = state.axes, state.round_up, state.depth, state.width
    v = np.asarray(state.grids[g])
    n_lo, n_hi, tn = positions(axes[0], n, round_up)
    y0, y1, u1 = positions(axes[1], ctx, round_up)
    z0, z1, v1 = positions(axes[2], prefix, round_up)
    k, j, t = positions(axes[3], chunk, round_up)
    u0, v0 = 1.0 - u1, 1.0 - v1
    a, b, dn, base = 1.0 - tn, tn, (n_hi - n_lo) * state.plane, n_lo * state.plane
    total = np.zeros(n.shape)
    for y, z, w in ((y0, z0, u0 * v0), (y0, z1, u0 * v1), (y1, z0, u1 * v0), (y1, z1, u1 * v1)):
        row = base + (y * depth + z) * width
        lo = 0.0 + a * v[row + k] + b * v[row + dn + k]
        hi = 0.0 + a * v[row + j] + b * v[row + dn + j]
        total = total + w * (lo + t * (hi - lo))
    out = [(x < ax[0]) | (x > ax[-1]) for ax, x in zip(axes, (n, ctx, prefix, chunk), strict=True)]
    clamped = out[0] | out[1] | out[2] | out[3]
    if count:
        state.counts[0] += int(clamped.sum())
        for i, o in enumerate(out, start=1):
            state.counts[i] += int(o.sum())
    return total.reshape(shape), clamped.reshape(shape)
