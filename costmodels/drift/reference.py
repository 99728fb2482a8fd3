"""The median a drift test compares against, for a cost table.

A table written with the ``round_up`` between rule answers between grid points
with the next grid point up (safe for planning), so its P50 over-predicts an
iteration that falls between grid points, by as much as the grid is coarse (10%
and more). Testing ``log(actual / P50)`` against that would read the rounding as
a speed-up. The drift tests therefore use the table's P50 *interpolated*
(multilinear over ``n_decode, ctx, prefix, chunk``: :mod:`..interp`, the
``linear`` rule's own arithmetic), whatever the table's rule. A query is in the
table's domain when it lies inside the grid's hull on every axis (between grid
values is inside); only a query beyond an edge is out (an axis calibrated at one
value, e.g. ``ctx = 0``, bounds the domain to that value, as the table's own
``out_of_domain`` count does). There the table clamps, and a miss means
"calibrate further", not "the device drifted". The tail test
keeps the table's own bound ``P99 + δ``, the one the scheduler planned with.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

#: Axis order of a cost table's arrays.
TABLE_AXES = ("n_decode", "ctx", "prefix", "chunk")


class TableMedian:
    """Interpolated P50 of a cost table and its domain (see module doc)."""

    def __init__(self, table: Any) -> None:
        axes = table.axes
        self._axes = [tuple(float(v) for v in axes[a]) for a in TABLE_AXES]
        from servecal.costmodels.interp import interpolate, interpolate_arrays, pack

        # the linear rule, whatever the table's; grid 0 of its own state
        self._state = pack(self._axes, [table.values(0.5)], round_up=False)
        self._interpolate, self._interpolate_arrays = interpolate, interpolate_arrays

    def in_domain(self, n_decode: float, chunk: float, ctx: float = 0, prefix: float = 0) -> bool:
        """Inside the grid's hull on every axis (between grid values counts as inside)."""
        for a, x in zip(self._axes, (n_decode, ctx, prefix, chunk), strict=True):
            if not a[0] <= x <= a[-1]:
                return False
        return True

    def domain_mask(
        self, n_decode: ArrayLike, chunk: ArrayLike, ctx: ArrayLike = 0, prefix: ArrayLike = 0
    ) -> np.ndarray:
        """:meth:`in_domain`, vectorised."""
        ok = np.ones(np.broadcast(n_decode, chunk, ctx, prefix).shape, dtype=bool)
        for a, x in zip(self._axes, (n_decode, ctx, prefix, chunk), strict=True):
            x = np.asarray(x, dtype=float)
            ok &= (x >= a[0]) & (x <= a[-1])
        return ok

    def __call__(self, n_decode: float, chunk: float, ctx: float = 0, prefix: float = 0) -> float:
        """Scalar median (the engine asks every iteration)."""
        return self._interpolate(self._state, 0, n_decode, ctx, prefix, chunk)

    def many(
        self, n_decode: ArrayLike, chunk: ArrayLike, ctx: ArrayLike = 0, prefix: ArrayLike = 0
    ) -> np.ndarray:
        """Vectorised median (clamped to the grid outside it)."""
        return self._interpolate_arrays(self._state, 0, False, n_decode, chunk, ctx, prefix)[0]


def reference_for(predictor: Any) -> TableMedian | None:
    """A :class:`TableMedian` for a cost table (anything with ``axes`` and ``values``)."""
    if hasattr(predictor, "axes") and callable(getattr(predictor, "values", None)):
        try:
            predictor.values(0.5)
        except (KeyError, ValueError):  # a table without a P50: use its predictions
            return None
        return TableMedian(predictor)
    return None
