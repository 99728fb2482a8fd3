"""Multilinear interpolation on a cost-table grid (the ``"linear"`` between rule).

A query ``(n_decode, ctx, prefix, chunk)`` lies in one grid box; its value is the
weighted sum of the box's corners, each weight the product of ``1 − t`` or ``t`` per
axis (``t`` the query's fraction of the way along that axis's interval). On an axis
where the query sits on a grid value (or the axis has one value) only one side
counts, so a query on grid points reads the stored value exactly. Outside the grid
each coordinate is clamped to the edge (``out`` says so).

**The order of the arithmetic** (one order, everywhere: the scalar path, ``max_chunk``
and the vectorised :meth:`Multilinear.many` give the same floats bit for bit):

1. *rows*: blend the chunk rows of the (one or two) ``n_decode`` sides,
   ``R = 0 + (1 − t_n)·V_lo + t_n·V_hi``, column by column, for each (ctx, prefix)
   side pair;
2. *chunk*: on each blended row, ``R[k] + t_c·(R[k+1] − R[k])``;
3. *sum*: over the four (ctx, prefix) side pairs, ctx outer, each weighted by
   ``w_ctx·w_prefix``, accumulated from 0. On a grid value (or clamped to an
   edge) an axis's second side has weight 0: it adds exactly ``+0.0``.

Why this keeps the table's promises: the grids are non-decreasing along every
axis and every weight is non-negative, so the interpolated value is
non-decreasing in every coordinate too. Along the chunk this holds exactly in
floating point as well (each blended row is non-decreasing, ``lo + t·(hi − lo)`` is
monotone in ``t``, and the pairs' weights are fixed), which ``max_chunk`` relies on;
along the other axes the weights ``1 − t, t`` trade off, so it holds to within
rounding.

**Why this order: speed.** The engine and the vLLM plug-in ask the scalar path every
step with the decodes' *mean* context, which is a new number almost every time, so
nothing keyed on the whole query is ever reused. ``n_decode`` and the prefix repeat,
though, so :meth:`Multilinear.corners` (``predict``'s scalar path) caches step 1's
rows per ``(n_decode, row)`` (:class:`BlendedGrid`): a query then costs a bisection
on ctx and prefix, four row look-ups and a few multiply-adds, written out as
straight-line code (it runs right after a scheduler's own step, where every Python
call and branch costs several times what it does in a loop). ``CostTable.max_chunk``
reads only one or two chunk columns on its usual path, so it blends the two
``n_decode`` sides inline at just those values (:data:`FlatSides`, made at load for
every integer ``n_decode`` by :meth:`Multilinear.integer_sides`) instead of filling
rows it would mostly not read.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import product

import numpy as np
from numpy.typing import ArrayLike

#: Entries kept per cache (axis sides, blended rows or columns); a cache is cleared
#: when full.
CACHE_SIZE = 4096

#: One axis's ``(offset, weight)`` pairs: one pair on a grid value, two between.
Sides = tuple[tuple[int, float], ...]
#: ``(out, a, b, dn, lo)``: one ``n_decode`` value's place on a flat grid
#: (:meth:`Multilinear.flat_sides`): whether it is clamped; its sides' weights ``a``,
#: ``b``, the flat offset ``lo`` of the low side and ``dn`` from there to the high
#: side. Step 1 at flat position ``p`` of a low-side row is ``0 + a·values[p] +
#: b·values[p + dn]`` (:func:`blend_row`).
FlatSides = tuple[bool, float, float, int, int]
#: ``(out, w0, r0, w1, r1, w2, r2, w3, r3)``: whether the query was clamped, and the
#: four weighted blended rows of step 3, in its order (:meth:`Multilinear.corners`).
Corners = tuple[
    bool, float, list[float], float, list[float], float, list[float], float, list[float]
]


def axis_position(axis: Sequence[float], x: float) -> tuple[int, float, bool]:
    """``(i, t, out)``: ``x`` lies ``t`` of the way from ``axis[i]`` to ``axis[i + 1]``
    (``t = 0`` on a grid value or past an edge, where ``out`` is true)."""
    if x <= axis[0]:
        return 0, 0.0, x < axis[0]
    last = len(axis) - 1
    if x >= axis[last]:
        return last, 0.0, x > axis[last]
    i = bisect_right(axis, x) - 1
    lo = axis[i]
    return i, 0.0 if x == lo else (x - lo) / (axis[i + 1] - lo), False


def blend_row(
    values: Sequence[float], start: int, dn: int, a: float, b: float, width: int
) -> list[float]:
    """Step 1 for one chunk row: ``0 + a·lo + b·hi`` column by column, the low side's
    row at flat offset ``start``, the high side's ``dn`` further (one side: ``dn`` 0)."""
    low = values[start : start + width]
    if not dn:
        return [0.0 + a * x for x in low]
    high = values[start + dn : start + dn + width]
    return [0.0 + a * x + b * y for x, y in zip(low, high, strict=True)]


def corner_value(corners: Corners, k: int, t: float) -> float:
    """Steps 2 and 3: the four weighted rows at chunk column ``k`` plus ``t`` of the
    way to ``k + 1``."""
    _, w0, r0, w1, r1, w2, r2, w3, r3 = corners
    if t == 0.0:
        return 0.0 + w0 * r0[k] + w1 * r1[k] + w2 * r2[k] + w3 * r3[k]
    a0, a1, a2, a3 = r0[k], r1[k], r2[k], r3[k]
    j = k + 1
    return (
        0.0
        + w0 * (a0 + t * (r0[j] - a0))
        + w1 * (a1 + t * (r1[j] - a1))
        + w2 * (a2 + t * (r2[j] - a2))
        + w3 * (a3 + t * (r3[j] - a3))
    )


class BlendedGrid:
    """One flat grid's chunk rows blended over ``n_decode`` (step 1), cached per
    ``n_decode`` value: its sides, whether it was clamped, and a list of rows indexed
    by (ctx, prefix) cell, filled on use (:meth:`Multilinear.corners`)."""

    __slots__ = ("values", "width", "cells", "by_n")

    def __init__(self, values: Sequence[float], width: int, cells: int) -> None:
        self.values = values
        self.width = width
        self.cells = cells  # (ctx, prefix) cells: rows per n_decode side
        self.by_n: dict[float, tuple[Sides, bool, list[list[float] | None]]] = {}

    def blend(self, rows: list[list[float] | None], n_sides: Sides, cell: int) -> list[float]:
        """Step 1 for one (ctx, prefix) cell, kept in ``rows``."""
        (lo, a), *hi = n_sides  # one side, or two
        dn, b = (hi[0][0] - lo, hi[0][1]) if hi else (0, 0.0)
        row = rows[cell] = blend_row(self.values, lo + cell * self.width, dn, a, b, self.width)
        return row


class Multilinear:
    """Positions and weights of queries on one grid; axes in storage order, chunk last."""

    def __init__(self, axes: Sequence[Sequence[float]]) -> None:
        self.axes = [[float(v) for v in a] for a in axes]
        self.shape = tuple(len(a) for a in self.axes)
        self.strides = [int(np.prod(self.shape[k + 1 :])) for k in range(len(self.shape))]

    def grid(self, values: Sequence[float]) -> BlendedGrid:
        """A flat grid (C order over the axes) ready for scalar queries."""
        return BlendedGrid(values, self.shape[3], self.shape[1] * self.shape[2])

    @staticmethod
    def _sides(axis: Sequence[float], x: float, stride: int) -> tuple[Sides, bool]:
        """:func:`axis_position` as (offset, weight) pairs: one on a grid value, two
        between (``n_decode``'s sides, cached per value with its blended rows)."""
        if x <= axis[0]:
            return ((0, 1.0),), x < axis[0]
        last = len(axis) - 1
        if x >= axis[last]:
            return ((last * stride, 1.0),), x > axis[last]
        i = bisect_right(axis, x) - 1
        lo = axis[i]
        if x == lo:
            return ((i * stride, 1.0),), False
        t = (x - lo) / (axis[i + 1] - lo)
        return ((i * stride, 1.0 - t), ((i + 1) * stride, t)), False

    def start_n(self, grid: BlendedGrid, n: float) -> tuple[Sides, bool, list[list[float] | None]]:
        """``grid``'s cache entry for a new ``n_decode`` value."""
        if len(grid.by_n) >= CACHE_SIZE:
            grid.by_n.clear()
        sides, out = self._sides(self.axes[0], n, self.strides[0])
        entry = grid.by_n[n] = (sides, out, [None] * grid.cells)
        return entry

    def flat_sides(self, n: float) -> FlatSides:
        """Where ``n_decode`` lies on a flat grid, as ``CostTable.max_chunk`` keeps it
        (it blends the two sides at only the values it reads): see :data:`FlatSides`.
        With one side (on a grid value, or clamped), ``dn`` is 0 and ``b`` 0.0."""
        sides, out = self._sides(self.axes[0], n, self.strides[0])
        if len(sides) == 1:
            return (out, sides[0][1], 0.0, 0, sides[0][0])
        (lo, a), (hi, b) = sides
        return (out, a, b, hi - lo, lo)

    def integer_sides(self, count: int) -> dict[float, FlatSides]:
        """:meth:`flat_sides` of the first ``count`` integers from the ``n_decode``
        axis's first value, up to its last (the same floats: ``t`` computed as
        :meth:`_sides` does), made in one pass over the axis's intervals."""
        axis, stride = self.axes[0], self.strides[0]
        end = min(int(axis[-1]), int(axis[0]) + count - 1)  # the last one made
        sides: dict[float, FlatSides] = {}
        for i in range(len(axis) - 1):
            lo, hi = axis[i], axis[i + 1]
            if lo > end:
                break
            sides[int(lo)] = (False, 1.0, 0.0, 0, i * stride)
            for n in range(int(lo) + 1, min(int(hi), end + 1)):
                t = (n - lo) / (hi - lo)
                sides[n] = (False, 1.0 - t, t, stride, i * stride)
        if axis[-1] <= end:
            sides[int(axis[-1])] = (False, 1.0, 0.0, 0, (len(axis) - 1) * stride)
        return sides

    def corners(self, grid: BlendedGrid, n: float, ctx: float, prefix: float) -> Corners:
        """Whether the query is clamped, and the weighted blended rows of its four
        (ctx, prefix) side pairs (steps 1 and 3), ctx outer. On a grid value an axis's
        second side has weight 0; past an edge (or on the last value) it repeats the
        first side's cell, with weight 0.

        The ctx and prefix sides are written out (one bisection each, no call): this
        runs every scheduler step with a new mean context, after the scheduler's own
        work has pushed it out of the CPU's caches, where each call and branch costs
        several times more."""
        entry = grid.by_n.get(n)
        if entry is None:
            entry = self.start_n(grid, n)
        n_sides, out, rows = entry
        # ctx: cells y0 (weight u0) and y1 (u1), stride |prefix|
        axis = self.axes[1]
        i = bisect_right(axis, ctx)
        if 0 < i < len(axis):  # axis[i - 1] <= ctx < axis[i]: t of the way (0 on the value)
            x = axis[i - 1]
            u1 = (ctx - x) / (axis[i] - x)
            u0 = 1.0 - u1
            y0 = (i - 1) * self.shape[2]
            y1 = y0 + self.shape[2]
        else:  # at or past the last value, or before the first: that edge alone
            y0 = y1 = 0 if i == 0 else (i - 1) * self.shape[2]
            u0, u1 = 1.0, 0.0
            out = out or ctx < axis[0] or ctx > axis[-1]
        # prefix: cells z0 (weight v0) and z1 (v1), stride 1
        axis = self.axes[2]
        z1 = bisect_right(axis, prefix)
        if 0 < z1 < len(axis):
            z0 = z1 - 1
            x = axis[z0]
            v1 = (prefix - x) / (axis[z1] - x)
            v0 = 1.0 - v1
        else:
            z0 = z1 = 0 if z1 == 0 else z1 - 1
            v0, v1 = 1.0, 0.0
            out = out or prefix < axis[0] or prefix > axis[-1]
        cell = y0 + z0
        r0 = rows[cell] or grid.blend(rows, n_sides, cell)
        cell = y0 + z1
        r1 = rows[cell] or grid.blend(rows, n_sides, cell)
        cell = y1 + z0
        r2 = rows[cell] or grid.blend(rows, n_sides, cell)
        cell = y1 + z1
        r3 = rows[cell] or grid.blend(rows, n_sides, cell)
        return out, u0 * v0, r0, u0 * v1, r1, u1 * v0, r2, u1 * v1, r3

    def at(self, grid: BlendedGrid, n: float, chunk: float, ctx: float, prefix: float) -> float:
        """One scalar value of ``grid`` (clamped silently; see :meth:`corners`)."""
        k, t, _ = axis_position(self.axes[3], chunk)
        return corner_value(self.corners(grid, n, ctx, prefix), k, t)

    def many(
        self,
        grid: np.ndarray,
        n_decode: ArrayLike,
        chunk: ArrayLike,
        ctx: ArrayLike = 0,
        prefix: ArrayLike = 0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised: interpolated ``grid`` values of the queries, and which were clamped.

        The same float operations in the same order as the scalar path (the module
        docstring's three steps; a side of weight 0 adds exactly 0), so each element
        equals the scalar answer bit for bit.
        """
        xs = np.broadcast_arrays(
            *(np.asarray(x, dtype=float) for x in (n_decode, ctx, prefix, chunk))
        )
        shape = xs[0].shape
        out = np.zeros(shape, dtype=bool)
        lows, highs, fracs = [], [], []
        for axis, x in zip(self.axes, xs, strict=True):
            a = np.asarray(axis)
            out |= (x < a[0]) | (x > a[-1])
            x = np.clip(x, a[0], a[-1])
            i = np.clip(np.searchsorted(a, x, side="right") - 1, 0, a.size - 1)
            j = np.minimum(i + 1, a.size - 1)
            with np.errstate(invalid="ignore", divide="ignore"):
                t = np.where(j > i, (x - a[i]) / (a[j] - a[i]), 0.0)
            lows.append(i)
            highs.append(j)
            fracs.append(np.where(x == a[i], 0.0, t))
        flat = np.asarray(grid, dtype=float).reshape(-1)
        s0, s1, s2 = self.strides[:3]
        n_lo, n_hi = lows[0] * s0, highs[0] * s0
        w_lo, w_hi = 1.0 - fracs[0], fracs[0]
        k, kh, tc = lows[3], highs[3], fracs[3]
        result = np.zeros(shape)
        for b_ctx, b_prefix in product((0, 1), repeat=2):
            offset = (highs[1] if b_ctx else lows[1]) * s1
            offset = offset + (highs[2] if b_prefix else lows[2]) * s2
            w_ctx = fracs[1] if b_ctx else 1.0 - fracs[1]
            weight = w_ctx * (fracs[2] if b_prefix else 1.0 - fracs[2])
            # step 1 at columns k and k + 1, then step 2
            lo = 0.0 + w_lo * flat[n_lo + offset + k] + w_hi * flat[n_hi + offset + k]
            hi = 0.0 + w_lo * flat[n_lo + offset + kh] + w_hi * flat[n_hi + offset + kh]
            result = result + weight * (lo + tc * (hi - lo))
        return result, out
