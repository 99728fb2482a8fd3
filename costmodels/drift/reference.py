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

At a grid point the calibration itself measured (with at least
:data:`MIN_REPEATS` repeats), the median compared against is the calibration's own
median there, which a fitted table keeps (``validation.calibration_medians``),
not the fit's P50: a smooth fit is off at some of its own points (by 10-20% on a
noisy CPU calibration), and that is the fit's error, which ``calibrate`` reports
held out, not a drift of the device since it was measured. Everywhere else (between
points, at points measured too few times, tables without them) the fit's P50.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from servecal.util.errors import InputError

#: Axis order of a cost table's arrays.
TABLE_AXES = ("n_decode", "ctx", "prefix", "chunk")

#: Key of a fitted table's ``validation`` object that holds the calibration's medians.
CALIBRATION_MEDIANS = "calibration_medians"

#: Fewest repeats at a grid point for its measured median to stand in for the fit's P50
#: (one or two noisy rows would be a worse reference than the fit).
MIN_REPEATS = 5


def calibration_medians(frame: Any) -> dict[str, Any]:
    """The median time of each grid point of ``frame`` (samples: the axes and ``ms``)
    measured at least :data:`MIN_REPEATS` times, as the table's ``validation`` keeps it."""
    stats = frame.groupby(list(TABLE_AXES))["ms"].agg(["median", "size"])
    stats = stats[stats["size"] >= MIN_REPEATS]
    return {
        "axes": list(TABLE_AXES),
        "min_repeats": MIN_REPEATS,
        "points": [[int(v) for v in point] for point in stats.index],
        "ms": [float(v) for v in stats["median"]],
    }


def _measured_medians(table: Any) -> dict[tuple[float, ...], float]:
    """``calibration_medians`` of a table's ``validation``, by point; empty without."""
    validation = getattr(table, "validation", None)
    raw = validation.get(CALIBRATION_MEDIANS) if isinstance(validation, dict) else None
    if raw is None:
        return {}
    try:
        pairs = zip(raw["points"], raw["ms"], strict=True)
        medians = {tuple(float(v) for v in p): float(m) for p, m in pairs}
        well_formed = list(raw["axes"]) == list(TABLE_AXES) and all(
            len(p) == 4 and m > 0 for p, m in medians.items()
        )
    except (KeyError, TypeError, ValueError):
        well_formed = False
    if not well_formed:
        raise InputError(
            f"the table's 'validation.{CALIBRATION_MEDIANS}' is malformed "
            "(axes, points and positive ms per point)"
        ) from None
    return medians


class TableMedian:
    """Interpolated P50 of a cost table and its domain (see module doc)."""

    def __init__(self, table: Any) -> None:
        axes = table.axes
        self._axes = [tuple(float(v) for v in axes[a]) for a in TABLE_AXES]
        from servecal.costmodels.interp import interpolate, interpolate_arrays, pack

        # the linear rule, whatever the table's; grid 0 of its own state
        self._state = pack(self._axes, [table.values(0.5)], round_up=False)
        self._interpolate, self._interpolate_arrays = interpolate, interpolate_arrays
        self._measured = _measured_medians(table)  # (n_decode, ctx, prefix, chunk) -> ms

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
        if self._measured:
            measured = self._measured.get((n_decode, ctx, prefix, chunk))
            if measured is not None:
                return measured
        return self._interpolate(self._state, 0, n_decode, ctx, prefix, chunk)

    def many(
        self, n_decode: ArrayLike, chunk: ArrayLike, ctx: ArrayLike = 0, prefix: ArrayLike = 0
    ) -> np.ndarray:
        """Vectorised median (clamped to the grid outside it)."""
        out = self._interpolate_arrays(self._state, 0, False, n_decode, chunk, ctx, prefix)[0]
        if not self._measured:
            return out
        out = np.array(out, dtype=float)  # writable, whatever the interpolation returned
        rows = np.column_stack(
            [np.broadcast_to(np.asarray(x, dtype=float), out.shape).ravel()
             for x in (n_decode, ctx, prefix, chunk)]
        )  # fmt: skip
        points, where = np.unique(rows, axis=0, return_inverse=True)
        # per distinct point (a grid's points, not its rows): its median, NaN if not kept
        kept = np.array([self._measured.get(tuple(p), np.nan) for p in points.tolist()])
        per_row = kept[where.reshape(-1)].reshape(out.shape)
        return np.where(np.isnan(per_row), out, per_row)


def reference_for(predictor: Any) -> TableMedian | None:
    """A :class:`TableMedian` for a cost table (anything with ``axes`` and ``values``)."""
    if hasattr(predictor, "axes") and callable(getattr(predictor, "values", None)):
        try:
            predictor.values(0.5)
        except (KeyError, ValueError):  # a table without a P50: use its predictions
            return None
        return TableMedian(predictor)
    return None
