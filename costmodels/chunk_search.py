"""The largest chunk whose bound fits a budget: :meth:`.table.CostTable.max_chunk`'s search.

The bound is the one ``predict`` and ``margin`` compute, ``f(c) + rho · m(c)``:
``f`` the planned quantile's grid at chunk ``c``, ``m`` the margin's quantile's
(the same grid when that is the planned one; ``rho = 0`` without a margin), both
by :func:`.interp.value_at` in the query's box, so every answer is exactly
consistent with ``predict``. Plain Python on a table's :class:`.interp.State`,
like :mod:`.interp` (one call per scheduler step; see there).
"""

from __future__ import annotations

from servecal.costmodels.interp import Box, State, beyond, box, tally, value_at


def bound_at(state: State, g: int, tail: int, rho: float, where: Box, c: int) -> float:
    """The bound at chunk ``c``: grid ``g`` plus ``rho`` times grid ``tail`` (``-1``:
    ``g``'s own, the planned quantile's margin, or no margin with ``rho`` 0)."""
    f = value_at(state, g, where, c)
    return f + rho * (f if tail < 0 else value_at(state, tail, where, c))


def largest_fitting_chunk(
    state: State, g: int, tail: int, rho: float, rises: bool,
    n: float, ctx: float, prefix: float, budget: float, limit: int,
) -> int:  # fmt: skip
    """Largest ``c`` in ``[1, limit]`` with ``bound_at(c) <= budget``, else 0 (also for
    a NaN budget); a query beyond the grid, or an answer past the chunk axis, counted
    once in the state.

    First the limit (the usual answer while decodes leave room: one evaluation).
    Then, where the bound ``rises`` (never decreases along the chunk: no margin, the
    margin of the planned quantile itself, or ``rho >= 0``), a bisection over the
    chunks; otherwise (one quantile plus another's negative margin, whose sum can
    fall) the chunks from the limit down, the first that fits."""
    limit = int(limit)
    if limit < 1:
        return 0
    n, ctx, prefix, budget = float(n), float(ctx), float(prefix), float(budget)
    where = box(state, n, ctx, prefix)
    if bound_at(state, g, tail, rho, where, limit) <= budget:
        answer = limit
    elif rises:
        fit, fail = 0, limit  # fit is 0 or fits; fail does not fit
        while fail - fit > 1:
            mid = (fit + fail) // 2
            if bound_at(state, g, tail, rho, where, mid) <= budget:
                fit = mid
            else:
                fail = mid
        answer = fit
    else:
        answer = limit - 1
        while answer > 0 and not bound_at(state, g, tail, rho, where, answer) <= budget:
            answer -= 1
    axes = state.axes
    out_n, out_c, out_p = beyond(axes[0], n), beyond(axes[1], ctx), beyond(axes[2], prefix)
    if out_n or out_c or out_p or answer > axes[3][-1]:
        tally(state, out_n, out_c, out_p, beyond(axes[3], answer))
    return answer
