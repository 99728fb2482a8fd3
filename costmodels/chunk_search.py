"""The largest chunk whose bound fits a budget: :meth:`.table.CostTable.max_chunk`'s search.

Two rules, two searches over the same question, both exact with the bound they are
given (the same function :meth:`.table.CostTable.predict` evaluates):

* :func:`largest_fitting_chunk` for a bound that is non-decreasing in the chunk and
  linear between the chunk axis's values (the ``"linear"`` rule, :mod:`.interp`):
  one evaluation at the limit (the usual answer while decodes leave room), else a
  bisection over the axis's columns to the segment where the bound crosses the
  budget, the line's crossing there, and the integer settled by the bound itself;
* :func:`round_up_fit` for a bound that is constant between columns (``"round_up"``):
  a scan of the stored row (exact even where float rounding of a negative margin
  left the row out of order).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence

#: How far (relative to the bound and budget) the line through a segment's two ends
#: must clear the budget for :func:`largest_fitting_chunk` to answer without the
#: bound at the integers next to it. The computed bound and the line through two
#: computed values each lie within about 50 units of rounding (2^-53) of the exact
#: piecewise-linear bound (a dozen non-negative products and sums, then the margin,
#: each off by at most one unit, times 1 + |rho|); 2^-40 is 8192 units, and still a
#: ten-billionth of a microsecond on a 30 ms budget.
LINE_SLACK = 2.0**-40


def largest_fitting_chunk(
    bound: Callable[[int], float],
    at_columns: Callable[[], list[float]],
    cols: Sequence[int],
    limit: int,
    budget: float,
    rho: float,
) -> int:
    """Largest ``c`` in ``[1, limit]`` with ``bound(c) <= budget``, else 0 (also for a
    NaN budget); ``bound`` non-decreasing, linear between the chunk columns ``cols``,
    ``at_columns()`` its values at them, its margin factor ``rho`` (0.0 without: it
    widens :data:`LINE_SLACK`)."""
    f_hi = bound(limit)
    if f_hi <= budget:  # the usual answer while decodes leave room: one evaluation
        return limit
    if math.isnan(budget):
        return 0
    values = at_columns()
    top = bisect_left(cols, limit)  # the first column at or past the limit
    k = min(bisect_right(values, budget), top) - 1  # the last column below it that fits
    lo, f_lo = (cols[k], values[k]) if k >= 0 else (0, math.nan)
    if k + 1 < top:
        hi, f_hi = cols[k + 1], values[k + 1]
    else:
        hi = limit
    if lo < 1:  # column 0 fits, or none: does chunk 1?
        lo, f_lo = 1, bound(1)
        if not f_lo <= budget or hi <= 1:
            return 0
    # one segment, the bound linear on it: the line's crossing, then the bound's own
    # answer next to it where the budget lies too close to the line to tell
    slope = (f_hi - f_lo) / (hi - lo)
    c = min(max(lo + int((budget - f_lo) / slope), lo), hi - 1)
    line = f_lo + (c - lo) * slope
    slack = LINE_SLACK * (1.0 + abs(rho)) * (f_hi + abs(budget))
    if (c == lo or line + slack <= budget) and (c + 1 == hi or line + slope - slack > budget):
        return c
    while c > lo and bound(c) > budget:
        c -= 1
    while c + 1 < hi and bound(c + 1) <= budget:
        c += 1
    return c


def round_up_fit(row: Sequence[float], cols: Sequence[int], limit: int, budget: float) -> int:
    """Largest ``c`` in ``[1, limit]`` whose round-up column's bound ``row[j]`` fits
    (column ``j`` answers chunks in ``(cols[j-1], cols[j]]``, the last also beyond)."""
    last = len(cols) - 1
    for j in range(last, -1, -1):
        if row[j] <= budget:
            top = limit if j == last else min(limit, cols[j])
            if j == 0 or top > cols[j - 1]:
                return top if top >= 1 else 0
    return 0
