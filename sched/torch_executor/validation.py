"""Online validation: how well the cost table predicts iterations that really ran.

An engine observer. For each iteration it checks the promise the scheduler plans
on, ``actual ≤ P99 + δ``, and the P50's absolute percentage error
``|actual − P50| / actual``, keeps running totals (shown live in the progress bar),
adds the two per-iteration values as columns of the run's iteration log
(``covered``, ``p50_ape``) and reports the totals in ``run.json`` under
``observers``. The same numbers over the whole run are also in the run summary's
``online`` block (computed from the log by :mod:`servecal.sched.metrics`).
"""

from __future__ import annotations

import math
from typing import Any

from servecal.sched.observe import IterationRecord


class OnlineValidation:
    """Running P99+δ coverage and P50 MAPE of the iterations observed."""

    def __init__(self) -> None:
        self.iterations = 0
        self.checked_p99 = 0
        self.covered = 0
        self.checked_p50 = 0
        self.ape_sum = 0.0
        self.ratio_log_sum = 0.0

    def observe(self, record: IterationRecord) -> dict[str, Any]:
        self.iterations += 1
        actual = record.actual_ms
        extra: dict[str, Any] = {}
        if math.isfinite(record.pred_p99):
            margin = record.margin if math.isfinite(record.margin) else 0.0
            hit = actual <= record.pred_p99 + margin
            self.checked_p99 += 1
            self.covered += hit
            extra["covered"] = bool(hit)
        if math.isfinite(record.pred_p50) and record.pred_p50 > 0 and actual > 0:
            ape = abs(actual - record.pred_p50) / actual
            self.checked_p50 += 1
            self.ape_sum += ape
            self.ratio_log_sum += math.log(actual / record.pred_p50)
            extra["p50_ape"] = ape
        return extra

    @property
    def coverage(self) -> float | None:
        return self.covered / self.checked_p99 if self.checked_p99 else None

    @property
    def p50_mape(self) -> float | None:
        return self.ape_sum / self.checked_p50 if self.checked_p50 else None

    @property
    def median_bias(self) -> float | None:
        """Geometric-mean ratio actual / P50 (1.0: unbiased)."""
        return math.exp(self.ratio_log_sum / self.checked_p50) if self.checked_p50 else None

    def line(self) -> str:
        """One line for the progress bar."""
        cov, mape = self.coverage, self.p50_mape
        if cov is None and mape is None:
            return "no predictions yet"
        parts = []
        if cov is not None:
            parts.append(f"P99+δ cov {100 * cov:.1f}%")
        if mape is not None:
            parts.append(f"P50 MAPE {100 * mape:.1f}%")
        return " · ".join(parts)

    def summary(self) -> dict[str, Any]:
        return {
            "iterations": self.iterations,
            "p99_coverage": self.coverage,
            "p50_mape": self.p50_mape,
            "actual_over_p50_geomean": self.median_bias,
        }
