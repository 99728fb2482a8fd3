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

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence


def largest_fitting_chunk(
    bound: Callable[[int], float], cols: Sequence[int], limit: int, budget: float
) -> int:
    """Largest ``c`` in ``[1, limit]`` with ``bound(c) <= budget``, else 0 (also for a
    NaN budget); ``bound`` non-decreasing, linear between the chunk columns ``cols``."""
    f_hi = bound(limit)
    if f_hi <= budget:
        return limit
    f_lo = bound(1)
    if not f_lo <= budget:
        return 0
    lo, hi = 1, limit  # invariant: bound(lo) fits, bound(hi) does not
    i, j = bisect_right(cols, lo), bisect_left(cols, hi)  # the columns inside (lo, hi)
    while i < j:
        mid = (i + j) // 2
        f = bound(cols[mid])
        if f <= budget:
            lo, f_lo, i = cols[mid], f, mid + 1
        else:
            hi, f_hi, j = cols[mid], f, mid
    # one segment: the line's crossing, then the bound's own answer next to it
    c = lo + int((budget - f_lo) / (f_hi - f_lo) * (hi - lo))
    c = min(max(c, lo), hi - 1)
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
