"""Group runs into report cells (TPOT target × workload × policy) and average seeds.

Per-run numbers come from each run's summary, which the engine computed with
``servecal.sched.metrics.summarize``; averaging over seeds goes through
``servecal.sched.metrics.mean_over_seeds``. The report never recomputes goodput.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from servecal.reports.loading import RunData
from servecal.sched.policies import is_baseline

WORKLOAD_ORDER = {"chat": 0, "mixed": 1, "long": 2, "bursty": 3}


def policy_order(policy: str) -> tuple[int, int, str]:
    """Static baselines first (by chunk size), then the adaptive policies."""
    digits = "".join(ch for ch in policy if ch.isdigit())
    return (0 if is_baseline(policy) else 1, int(digits) if digits else 10**9, policy)


@dataclass(frozen=True)
class Cell:
    """All seeds of one (TPOT target, workload, policy) and their mean and spread."""

    tpot_slo_ms: float
    workload: str
    policy: str
    runs: tuple[RunData, ...]
    mean: dict[str, float]
    spread: dict[str, float]

    def get(self, key: str) -> float:
        return self.mean.get(key, math.nan)


def _seed_stats(runs: Sequence[RunData]) -> tuple[dict[str, float], dict[str, float]]:
    from servecal.sched.metrics import mean_over_seeds

    merged = mean_over_seeds([r.summary for r in runs])
    mean = {k: float(v) for k, v in merged.items() if _number(v) and not k.endswith("_std")}
    spread = {k[:-4]: float(v) for k, v in merged.items() if k.endswith("_std") and _number(v)}
    return mean, spread


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def cells(runs: Sequence[RunData]) -> list[Cell]:
    """One cell per (target, workload, policy), sorted for tables."""
    groups: dict[tuple[float, str, str], list[RunData]] = {}
    for run in runs:
        groups.setdefault((run.tpot_slo_ms, run.workload, run.policy), []).append(run)
    out = []
    for (tpot, workload, policy), members in groups.items():
        members.sort(key=lambda r: r.seed)
        mean, spread = _seed_stats(members)
        out.append(Cell(tpot, workload, policy, tuple(members), mean, spread))
    out.sort(key=lambda c: (c.tpot_slo_ms, workload_order(c.workload), policy_order(c.policy)))
    return out


def targets(cs: Sequence[Cell]) -> list[float]:
    return sorted({c.tpot_slo_ms for c in cs})


def workload_order(workload: str) -> tuple[int, str]:
    """The four standard workloads in SPEC order, then any other (traces) by name."""
    return (WORKLOAD_ORDER.get(workload, len(WORKLOAD_ORDER)), workload)


def workloads(cs: Sequence[Cell]) -> list[str]:
    return sorted({c.workload for c in cs}, key=workload_order)


def best_static(cs: Sequence[Cell], tpot: float, workload: str) -> Cell | None:
    """The static policy with the highest mean goodput at this target and workload."""
    static = [
        c for c in cs
        if c.tpot_slo_ms == tpot and c.workload == workload and is_baseline(c.policy)
        and not math.isnan(c.get("goodput"))
    ]  # fmt: skip
    return max(static, key=lambda c: c.get("goodput"), default=None)
