"""What :meth:`.table.CostTable.max_chunk` keeps between calls, and its helpers.

``max_chunk`` (in :mod:`.table`) runs at every step of a scheduler, so its state is
laid out for it: :class:`ChunkSearch` holds in one tuple what every call reads (the
grid of the last call's quantile and margin flag, the ``n_decode`` sides made at load,
the ctx axis's look-up, the chunk columns), and the columns its walks have read, per
box. The arithmetic is :mod:`.interp`'s, in the same order (see ``max_chunk``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from servecal.costmodels.interp import CACHE_SIZE, Multilinear

#: How far (relative to the bound and budget) :meth:`.table.CostTable.max_chunk`'s line
#: through two chunk columns must clear the budget to decide without evaluating the
#: bound exactly. The computed bound at a chunk and the line through the computed
#: column values both lie within about 50 units of rounding (2^-53) of the exact
#: piecewise-linear bound (a dozen non-negative products and sums, then the margin,
#: each off by at most one unit, times 1 + |rho|); 2^-40 is 8192 units, and still
#: a ten-billionth of a microsecond on a 30 ms budget: the exact settle runs only
#: where the budget lies that close to a chunk's bound (the tests put it there).
LINE_SLACK = 2.0**-40


def keep_bounded(cache: dict, key: Any, value: Any) -> Any:
    """``cache[key] = value``, the cache emptied first when it holds
    :data:`.interp.CACHE_SIZE` entries (a long run's fractions and boxes stay bounded)."""
    if len(cache) >= CACHE_SIZE:
        cache.clear()
    cache[key] = value
    return value


def blend_column(
    box: list[tuple[float, float, float, float] | None], values: list[float], dn: int,
    a: float, b: float, rows: tuple[int, int, int, int], j: int,
) -> tuple[float, float, float, float]:  # fmt: skip
    """Step 1 (:func:`.interp.blend_row`) at chunk column ``j`` of a box's four rows,
    given by the flat offsets of their low ``n_decode`` side (the high side ``dn``
    further), weighted ``a`` and ``b``; kept in ``box`` (:meth:`.table.CostTable.max_chunk`'s
    walk reads it from there next time). (Without interp's leading ``0.0 +``: it adds
    exactly nothing to a product of non-negative numbers.)"""
    p0, p1, p2, p3 = rows
    column = box[j] = (
        a * values[p0 + j] + b * values[p0 + dn + j],
        a * values[p1 + j] + b * values[p1 + dn + j],
        a * values[p2 + j] + b * values[p2 + dn + j],
        a * values[p3 + j] + b * values[p3 + dn + j],
    )
    return column


def settle(
    at_k: tuple[float, float, float, float], at_next: tuple[float, float, float, float],
    weights: tuple[float, float, float, float], rho: float, x0: float, x1: float,
    fit: int, fail: int, c: int, budget_ms: float,
) -> int:  # fmt: skip
    """The largest chunk in ``[fit, fail)`` whose bound fits the budget (``fit`` does,
    ``fail`` does not; ``c`` the line's guess), the bound evaluated as :meth:`predict`
    does between chunk columns at ``x0`` and ``x1``: at ``t = (c - x0) / (x1 - x0)``
    of the way, each of the four rows as its value there plus ``t`` times its step
    to the next column (``at_k``, ``at_next``: step 1's values at both columns)."""
    a0, a1, a2, a3 = at_k
    b0, b1, b2, b3 = at_next
    d0, d1, d2, d3 = b0 - a0, b1 - a1, b2 - a2, b3 - a3
    w0, w1, w2, w3 = weights
    span = x1 - x0
    while fail - fit > 1:
        if c <= fit:
            c = fit + 1
        elif c >= fail:
            c = fail - 1
        t = (c - x0) / span
        f = 0.0 + w0 * (a0 + t * d0) + w1 * (a1 + t * d1) + w2 * (a2 + t * d2) + w3 * (a3 + t * d3)
        f = f + rho * f
        if f <= budget_ms:
            fit, c = c, c + 1
        else:
            fail, c = c, c - 1
    return fit


def sides_by_position(
    axis: Sequence[int], stride: int
) -> tuple[list[float], list[tuple[int, int, float, float]]]:
    """An axis as floats, and for each ``bisect_right`` position on it the flat offsets
    of the two sides, the lower value and the step from it to the upper: 0.0 before
    the first value and past the last, where the first side alone counts (its second
    is the next value's before the first, itself past the last: so each first side
    comes with one second side, and a walk's box is known by its first row):
    :meth:`.table.CostTable.max_chunk`'s look-up."""
    values = [float(v) for v in axis]
    edge = (len(values) - 1) * stride
    inner = [
        ((i - 1) * stride, i * stride, values[i - 1], values[i] - values[i - 1])
        for i in range(1, len(values))
    ]
    return values, [(0, stride if inner else 0, 0.0, 0.0), *inner, (edge, edge, 0.0, 0.0)]


#: How many integer ``n_decode`` values (from the axis's first) get their sides at
#: load: every one a scheduler asks of an axis up to a few thousand (0.3 ms for
#: 513), a bounded cost for a longer axis (the rest are made as they come).
PREMADE_N_DECODE = 4096

#: An ``n_decode`` value's sides for :meth:`.table.CostTable.max_chunk`: its
#: :data:`.interp.FlatSides` and the base of its walks' box keys (each box: the base
#: plus its first row's flat offset, complemented when all four rows count; bases are
#: a grid's size apart, and one is never handed out twice).
NSides = tuple[bool, float, float, int, int, int]


class ChunkSearch:
    """What :meth:`.table.CostTable.max_chunk` reads, in slots (a table's own attributes are
    many; these are few and fixed): above all ``hot``, what every call reads, as one
    tuple; then the prefix axis's look-up (a prompt's later chunks), the chunk
    columns as floats, the sides of fractional ``n_decode`` values (as they come),
    the walks' columns per box, and the segment of the last crossing."""

    __slots__ = ("grids", "prefix_axis", "prefix_cells", "fcols", "last", "n_other",
                 "size", "next_base", "hot", "boxes", "mode_boxes", "hint")  # fmt: skip

    def __init__(
        self,
        lin: Multilinear,
        grids: dict[tuple[float, bool], tuple[list[float], float]],
    ) -> None:
        # by (quantile, with margin): the flat grid and the margin's factor (0.0
        # without); absent under round-up and for P50 + the P99's margin (two grids),
        # which take CostTable._max_chunk_other
        self.grids = grids
        axes, strides = lin.axes, lin.strides
        ctx_axis, ctx_cells = sides_by_position(axes[1], strides[1])
        self.prefix_axis, self.prefix_cells = sides_by_position(axes[2], strides[2])
        cols = [int(c) for c in axes[3]]
        self.fcols, self.last = axes[3], len(cols) - 1
        # n_decode -> its sides (the integers on the axis's range, made at load, up to
        # PREMADE_N_DECODE: a scheduler asks integers, and making each on first use
        # cost a short run ~1%); other values in n_other as they come (emptied when
        # full), their box keys' bases past the integers'
        self.size = math.prod(lin.shape)
        made = lin.integer_sides(PREMADE_N_DECODE)
        n_sides = {n: (*sides, n * self.size) for n, sides in made.items()}
        self.next_base = (max(n_sides) + 1) * self.size
        self.n_other: dict[float, NSides] = {}
        # (the mode is the last call's quantile and margin flag; none yet) and its
        # grid, the n_decode sides, the prefix axis's first value (an int, as the
        # axis's values are: a scheduler's int prefix compares fastest), the ctx
        # axis's look-up, and the chunk columns (bisect_left on all but the last: a
        # column index <= last)
        self.hot = (math.nan, False, [], 0.0, n_sides, int(axes[2][0]), ctx_axis, ctx_cells,
                    cols[:-1], cols)  # fmt: skip
        # the walks' columns by box (its key, see NSides -> column -> the four rows'
        # values there): the mode's, and every mode's
        self.mode_boxes: dict[int, list] = {}
        self.boxes: dict[tuple[float, bool], dict[int, list]] = {}
        # a column index: the segment of the last crossing, or higher where a limit
        # fitted since; a limit no further is probed inline first, else the walk
        # starts there (at first: the last column, so the limit's is probed)
        self.hint = self.last

    @property
    def n_sides(self) -> dict[float, NSides]:
        """The sides of every integer ``n_decode`` on the axis's range (made at load)."""
        return self.hot[4]
