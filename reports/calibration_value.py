"""What calibration is worth: one policy, one rate, planned on different cost models.

Shown when the runs hold the same deadline-aware policy (SLOWeave) at the same
workload, TPOT target and offered rate planned in several ways — the runs
``benchmarks/calibration_value.py`` writes:

(a) ``oracle``: the truth's own formula (what a perfect table gives);
(b) the fitted table's P99 + δ (the default);
(c) the same table's P50 only (``sloweave-p50``: no tail, no margin);
(d) a stale table: the truth drifted (``--drift``) while the table did not;
(e) the same stale table with the drift monitor's adaptive margin.

TPOT attainment at the common rate says what each loses per request; the maximum
goodput of each (when searched) what it costs in sustainable load.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from servecal.reports.aggregate import Cell, cells, workload_order
from servecal.reports.blocks import Section, Table, Text, fmt, pct
from servecal.reports.drift import online_validation
from servecal.reports.loading import RunData
from servecal.reports.scheduling import max_goodput_text

#: The policies whose planning the section compares (their family name).
FAMILY = "sloweave"


def configuration(cell: Cell) -> tuple[int, str]:
    """``(order, label)`` of how a SLOWeave cell planned: (a) … (e) as in the module doc."""
    run = cell.runs[0]
    predictor = run.predictor or "not recorded"
    drift = run.config.get("drift")
    name = cell.policy.split("[")[0]
    options = run.config.get("policy_options") or {}
    p50 = name.endswith("-p50") or (
        options.get("quantile") == 0.5 and not options.get("use_margin", True)
    )
    if predictor.split(":")[0] == "oracle" and not drift:
        return 0, "(a) oracle (the truth's own formula)"
    if drift and run.config.get("adaptive_margin"):
        return 4, f"(e) stale table (drift {drift}) + adaptive margin, {predictor}"
    if drift:
        return 3, f"(d) stale table (drift {drift}), {predictor}"
    if p50:
        return 2, f"(c) P50 only, {predictor}"
    return 1, f"(b) P99 + δ, {predictor}"


def _family(cs: Sequence[Cell]) -> list[Cell]:
    return [c for c in cs if c.policy.split("[")[0].startswith(FAMILY)]


def _groups(cs: Sequence[Cell]) -> list[list[Cell]]:
    """SLOWeave cells at the same workload, target and rate, planned in ≥ 2 ways."""
    out: dict[tuple, list[Cell]] = {}
    for c in _family(cs):
        key = (workload_order(c.workload), c.tpot_slo_ms, None if math.isnan(c.rate) else c.rate)
        out.setdefault(key, []).append(c)
    groups = []
    for key in sorted(out, key=lambda k: (k[0], k[1], k[2] or 0.0)):
        labels = {configuration(c)[1] for c in out[key]}
        if len(labels) >= 2:
            groups.append(sorted(out[key], key=configuration))
    return groups


def _mean_sd(values: list[float], percent: bool = True) -> str:
    v = [x for x in values if not math.isnan(x)]
    if not v:
        return "—"
    show = pct if percent else fmt
    sd = float(np.std(v, ddof=1)) if len(v) > 1 else 0.0
    return show(float(np.mean(v))) + (f" ± {show(sd)}" if sd > 0 else "")


def _row(cell: Cell) -> tuple[str, ...]:
    tpot = [float(r.summary.get("tpot_attainment", math.nan)) for r in cell.runs]
    att = [float(r.summary.get("attainment", math.nan)) for r in cell.runs]
    cover = [online_validation(r)[1] for r in cell.runs]
    return (
        configuration(cell)[1],
        _mean_sd(tpot),
        _mean_sd(att),
        fmt(cell.get("p99_tpot_ms")),
        _mean_sd(cover),
        max_goodput_text(cell),
        str(len(cell.runs)),
    )


def calibration_value_section(runs: Sequence[RunData]) -> Section | None:
    """The section, or ``None`` when no group of runs compares planning models."""
    groups = _groups(cells(runs))
    if not groups:
        return None
    blocks: list = [
        Text(
            "The same policy (SLOWeave) at the same offered rate, planned on (a) the oracle, "
            "(b) the fitted table's P99 + δ, (c) its P50 alone, (d) a stale table — the truth "
            "drifted while the table did not — and (e) that stale table with the drift "
            "monitor's adaptive margin. TPOT attainment is the share of requests whose own "
            "P99 inter-token gap met their TPOT SLO; max goodput is each configuration's own "
            "highest rate with ≥ 90% within SLO (searched per seed)."
        )
    ]
    for group in groups:
        first = group[0]
        rate = "its trace's times" if math.isnan(first.rate) else f"{fmt(first.rate)} req/s"
        blocks.append(
            Table(
                f"{first.workload}, TPOT {fmt(first.tpot_slo_ms)} ms, at {rate}",
                (
                    "planning",
                    "TPOT attainment",
                    "SLO attainment",
                    "P99 TPOT (ms)",
                    "actual ≤ P99 + δ (online)",
                    "max goodput (req/s)",
                    "seeds",
                ),
                tuple(_row(c) for c in group),
                "Mean ± standard deviation over seeds. Online coverage: iterations whose "
                "actual time stayed within the bound the run planned on (P50-only planning "
                "plans on less; its coverage is still of the table's P99 + δ).",
            )  # fmt: skip
        )
    return Section("calibration-value", "What calibration is worth", tuple(blocks))
