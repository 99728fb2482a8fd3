"""Interpolation on a cost-table grid: the one routine behind every answer of a table.

``CostTable.predict`` (a scalar or arrays), ``margin``, ``energy``, the bound that
``max_chunk`` searches (:mod:`.chunk_search`) and the drift tests' median
(:mod:`.drift.reference`) all call :func:`value_at`, so they agree bit for bit.

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

**Compiled, on one array.** The routines are numba functions (``njit(cache=True)``,
compiled in a fresh install on first import, ~5 s, then loaded from
``__pycache__``; imported with the first cost table). The engine and the vLLM
plug-in ask a table at every scheduler step, where plain Python spent more on
locating a query and reading its corners than a compiled call costs. What such a
call costs is mostly numba's dispatch, and out of the CPU's caches (as right after
a scheduler's own step) each array argument adds 1.5–3 µs to it, a number far
less (``benchmarks/cold_call.py``):
so a table's whole state is one float64 array (:func:`pack`), and a call names the
grids in it by index. Signatures are explicit, so numba converts any Python or
numpy number to float64 (one compiled version per routine; never single precision)
and refuses arrays with a TypeError.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import ArrayLike

#: The clamped-query counts at the head of a state (:func:`pack`): the queries
#: counted, then per axis how many of them lay beyond it.
COUNTS = ("queries", "n_decode", "ctx", "prefix", "chunk")
#: Where a state holds its rule (1.0: round up), then the four axes' lengths.
RULE, LENGTHS = 5, 6


def pack(axes: Sequence[Sequence[float]], grids: Sequence[ArrayLike], round_up: bool) -> np.ndarray:
    """A table's state as the compiled routines take it, one float64 array: the
    clamped-query counts (:data:`COUNTS`, zero), the rule, the axes' lengths and
    values, then each grid (flat, C order), numbered from 0 in the order given."""
    head = [0.0] * len(COUNTS) + [float(round_up)] + [len(a) for a in axes]
    values = [float(v) for a in axes for v in a]
    flat = [np.asarray(g, dtype=np.float64).reshape(-1) for g in grids]
    return np.concatenate([np.array(head + values), *flat])


@njit("f8[::1](f8[::1], i8)", cache=True)
def axis_of(state: np.ndarray, k: int) -> np.ndarray:
    """Axis ``k``'s values (a view into the state)."""
    start = LENGTHS + 4
    for i in range(k):
        start += int(state[LENGTHS + i])
    return state[start : start + int(state[LENGTHS + k])]


@njit("f8[::1](f8[::1], i8)", cache=True)
def grid_of(state: np.ndarray, g: int) -> np.ndarray:
    """Grid ``g``'s values (a view into the state)."""
    start, size = LENGTHS + 4, 1
    for i in range(4):
        start += int(state[LENGTHS + i])
        size *= int(state[LENGTHS + i])
    return state[start + g * size : start + (g + 1) * size]


@njit("Tuple((i8, i8, f8))(f8[::1], f8, b1)", cache=True)
def position(axis: np.ndarray, x: float, round_up: bool) -> tuple[int, int, float]:
    """``(lo, hi, t)``: ``x`` lies ``t`` of the way from ``axis[lo]`` to ``axis[hi]``;
    beyond an edge (or NaN) that edge with ``t = 0``. ``round_up``: the first value at
    or above ``x`` (Python's ``bisect_left``), with ``t = 0``."""
    last = axis.size - 1
    lo, hi = 0, axis.size
    if round_up:
        while lo < hi:
            mid = (lo + hi) // 2
            if axis[mid] < x:
                lo = mid + 1
            else:
                hi = mid
        i = min(lo, last)
        return i, i, 0.0
    while lo < hi:  # bisect_right: the first value above x
        mid = (lo + hi) // 2
        if x < axis[mid]:
            hi = mid
        else:
            lo = mid + 1
    if lo == 0:
        return 0, 0, 0.0
    if lo > last:
        return last, last, 0.0
    low = axis[lo - 1]
    return lo - 1, lo, (x - low) / (axis[lo] - low)


@njit("b1(f8[::1], i8, f8)", cache=True)
def beyond(state: np.ndarray, k: int, x: float) -> bool:
    """Whether ``x`` lies beyond axis ``k``'s edges (its answer is clamped there)."""
    axis = axis_of(state, k)
    return x < axis[0] or x > axis[-1]


@njit("void(f8[::1], b1, b1, b1, b1)", cache=True)
def tally(state: np.ndarray, n: bool, ctx: bool, prefix: bool, chunk: bool) -> None:
    """Count one clamped query (:data:`COUNTS`), on each axis it lies beyond."""
    state[0] += 1.0
    state[1] += n
    state[2] += ctx
    state[3] += prefix
    state[4] += chunk


#: A query's place in the grid apart from the chunk (:func:`box`): the weights of the
#: low and high ``n_decode`` sides, the flat distance between them, the flat offsets
#: of the four (ctx, prefix) rows' low sides (ctx outer) and their weights.
Box = tuple[float, float, int, int, int, int, int, float, float, float, float]
#: :data:`Box` as numba spells it in a signature.
BOX = "Tuple((f8, f8, i8, i8, i8, i8, i8, f8, f8, f8, f8))"


@njit(f"{BOX}(f8[::1], f8, f8, f8)", cache=True)
def box(state: np.ndarray, n: float, ctx: float, prefix: float) -> Box:
    """Where ``(n_decode, ctx, prefix)`` lies: see :data:`Box`."""
    round_up = state[RULE] == 1.0
    depth, width = int(state[LENGTHS + 2]), int(state[LENGTHS + 3])  # prefix values, columns
    plane = int(state[LENGTHS + 1]) * depth * width  # the values of one n_decode value
    n_lo, n_hi, tn = position(axis_of(state, 0), n, round_up)
    y0, y1, u1 = position(axis_of(state, 1), ctx, round_up)
    z0, z1, v1 = position(axis_of(state, 2), prefix, round_up)
    u0, v0 = 1.0 - u1, 1.0 - v1
    base = n_lo * plane
    return (
        1.0 - tn,
        tn,
        (n_hi - n_lo) * plane,
        base + (y0 * depth + z0) * width,
        base + (y0 * depth + z1) * width,
        base + (y1 * depth + z0) * width,
        base + (y1 * depth + z1) * width,
        u0 * v0,
        u0 * v1,
        u1 * v0,
        u1 * v1,
    )


@njit("f8(f8[::1], i8, i8, f8, f8, i8, i8, f8)", cache=True)
def _row(values: np.ndarray, row: int, dn: int, a: float, b: float, k: int, j: int, t: float):
    """Steps 1 and 2 on one (ctx, prefix) row: blended over ``n_decode`` at chunk
    columns ``k`` and ``j``, then ``t`` of the way from the one to the other."""
    lo = 0.0 + a * values[row + k] + b * values[row + dn + k]
    hi = 0.0 + a * values[row + j] + b * values[row + dn + j]
    return lo + t * (hi - lo)


@njit(f"f8(f8[::1], i8, {BOX}, f8)", cache=True)
def value_at(state: np.ndarray, g: int, where: Box, chunk: float) -> float:
    """Grid ``g``'s value at ``chunk`` in the query's :func:`box` (steps 1-3)."""
    values = grid_of(state, g)
    a, b, dn, p0, p1, p2, p3, w0, w1, w2, w3 = where
    k, j, t = position(axis_of(state, 3), chunk, state[RULE] == 1.0)
    return (
        0.0
        + w0 * _row(values, p0, dn, a, b, k, j, t)
        + w1 * _row(values, p1, dn, a, b, k, j, t)
        + w2 * _row(values, p2, dn, a, b, k, j, t)
        + w3 * _row(values, p3, dn, a, b, k, j, t)
    )


@njit("f8(f8[::1], i8, f8, f8, f8, f8)", cache=True)
def interpolate(state: np.ndarray, g: int, n: float, ctx: float, prefix: float, chunk: float):
    """One query's value of grid ``g``, counted in the state if it lies beyond the grid."""
    out_n, out_c, out_p = beyond(state, 0, n), beyond(state, 1, ctx), beyond(state, 2, prefix)
    out_k = beyond(state, 3, chunk)
    if out_n or out_c or out_p or out_k:
        tally(state, out_n, out_c, out_p, out_k)
    return value_at(state, g, box(state, n, ctx, prefix), chunk)


@njit("Tuple((f8[::1], b1[::1]))(f8[::1], i8, b1, f8[::1], f8[::1], f8[::1], f8[::1])", cache=True)
def interpolate_many(
    state: np.ndarray, g: int, count: bool,
    n: np.ndarray, ctx: np.ndarray, prefix: np.ndarray, chunk: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """:func:`interpolate` for each query of four equal-length arrays (counted only
    if ``count``): the values, and which queries were clamped."""
    counts = state[: len(COUNTS)].copy()
    result = np.empty(n.size)
    clamped = np.zeros(n.size, dtype=np.bool_)
    for i in range(n.size):
        before = state[0]
        result[i] = interpolate(state, g, n[i], ctx[i], prefix[i], chunk[i])
        clamped[i] = state[0] != before
    if not count:
        state[: len(COUNTS)] = counts
    return result, clamped


def entry_point(routine: Any) -> Callable[..., Any]:
    """The compiled code of a routine of one explicit signature, called without numba's
    dispatcher. The dispatcher matches the arguments' types to the signature at every
    call, ~7 µs out of the CPU's caches (as right after a scheduler's step: a quarter
    of ``max_chunk``'s cost there, ``benchmarks/cold_call.py``); the compiled code
    converts numbers itself. Only for
    arguments the signature takes (numbers, a table's own state): an array in a
    number's place is converted, or refused, by numpy, not typed."""
    (signature,) = routine.signatures
    return routine.overloads[signature].entry_point


def interpolate_arrays(
    state: np.ndarray, g: int, count: bool,
    n: ArrayLike, chunk: ArrayLike, ctx: ArrayLike, prefix: ArrayLike,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """:func:`interpolate_many` on any broadcastable shapes: the values and which
    were clamped, in the broadcast shape."""
    xs = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (n, ctx, prefix, chunk)))
    flat = [np.array(x, dtype=np.float64).reshape(-1) for x in xs]  # (writable: numba's type)
    result, clamped = interpolate_many(state, g, count, *flat)
    return result.reshape(xs[0].shape), clamped.reshape(xs[0].shape)
