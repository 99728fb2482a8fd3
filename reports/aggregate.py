"""Group runs into report cells (TPOT target × workload × policy × setup) and average seeds.

A run's *setup* is what it was simulated and planned on (truth, predictor, an injected
drift, the adaptive margin): runs of different setups are never averaged together,
and every table says which setup its numbers come from.

Per-run numbers come from each run's summary, which the engine computed with
``servecal.sched.metrics.summarize``; averaging over seeds goes through
``servecal.sched.metrics.mean_over_seeds``. The report never recomputes goodput.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from servecal.reports.loading import RunData
from servecal.sched.policies import is_baseline as _is_baseline

WORKLOAD_ORDER = {"chat": 0, "mixed": 1, "long": 2, "bursty": 3}


def is_baseline(policy: str) -> bool:
    """Whether a policy label (``fixed-512``, ``budget-512[order=edf]``) is a static
    baseline."""
    return _is_baseline(policy.split("[")[0])


def policy_order(policy: str) -> tuple[int, int, str]:
    """Static baselines first (by chunk size), then the adaptive policies."""
    digits = "".join(ch for ch in policy if ch.isdigit())
    return (0 if is_baseline(policy) else 1, int(digits) if digits else 10**9, policy)


def setup_of(run: RunData) -> str:
    """What a run was simulated and planned on, in words: ``truth device · predictor
    fitted`` (+ ``, drift 30%:1.15``, ``, adaptive margin``)."""
    from servecal.sched.experiment.models import models_label

    if run.truth is None and run.predictor is None:
        label = "truth and predictor not recorded"
    else:
        truth = None if run.config.get("backend") == "torch" else run.truth
        label = models_label(truth, run.predictor or "not recorded")
    if run.config.get("drift"):
        label += f", drift {run.config['drift']}"
    if run.config.get("adaptive_margin"):
        label += ", adaptive margin"
    return label


@dataclass(frozen=True)
class Cell:
    """All seeds of one (TPOT target, workload, policy, setup, rate) and their mean
    and spread; ``searches``: the seeds' max-goodput searches (``goodput_search``)."""

    tpot_slo_ms: float
    workload: str
    policy: str
    runs: tuple[RunData, ...]
    mean: dict[str, float]
    spread: dict[str, float]
    setup: str = ""
    rate: float = math.nan

    def get(self, key: str) -> float:
        return self.mean.get(key, math.nan)

    @property
    def searches(self) -> tuple[dict, ...]:
        return tuple(r.search for r in self.runs if r.search is not None)

    @property
    def searched(self) -> bool:
        """Every seed carries a max-goodput search."""
        return bool(self.runs) and len(self.searches) == len(self.runs)

    @property
    def max_goodput(self) -> float:
        """Mean over seeds of the searched maximum (NaN when not searched)."""
        if not self.searched:
            return math.nan
        return sum(float(s["max_goodput"]) for s in self.searches) / len(self.searches)

    @property
    def max_goodput_bound(self) -> str:
        """``measured``, or ``above_cap`` / ``below_floor`` when any seed hit a limit."""
        bounds = {s.get("bound", "measured") for s in self.searches}
        if bounds <= {"measured"}:
            return "measured"
        return "above_cap" if "above_cap" in bounds else "below_floor"


def _seed_stats(runs: Sequence[RunData]) -> tuple[dict[str, float], dict[str, float]]:
    from servecal.sched.metrics import mean_over_seeds

    merged = mean_over_seeds([r.summary for r in runs])
    mean = {k: float(v) for k, v in merged.items() if _number(v) and not k.endswith("_std")}
    spread = {k[:-4]: float(v) for k, v in merged.items() if k.endswith("_std") and _number(v)}
    return mean, spread


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _key_nan(value: float) -> float | None:
    return None if math.isnan(value) else value  # NaN never equals itself: not a key


def cells(runs: Sequence[RunData]) -> list[Cell]:
    """One cell per (target, workload, policy, setup, rate), sorted for tables."""
    groups: dict[tuple, list[RunData]] = {}
    for run in runs:
        key = (_key_nan(run.tpot_slo_ms), run.workload, run.policy, setup_of(run),
               _key_nan(run.rate))  # fmt: skip
        groups.setdefault(key, []).append(run)
    out = []
    for members in groups.values():
        members.sort(key=lambda r: r.seed)
        mean, spread = _seed_stats(members)
        first = members[0]
        out.append(Cell(first.tpot_slo_ms, first.workload, first.policy, tuple(members), mean,
                        spread, setup_of(first), first.rate))  # fmt: skip
    out.sort(key=lambda c: (c.tpot_slo_ms, c.setup, workload_order(c.workload),
                            policy_order(c.policy), _key_nan(c.rate) or 0.0))  # fmt: skip
    return out


def setups(cs: Sequence[Cell]) -> list[str]:
    return list(dict.fromkeys(c.setup for c in cs))


def targets(cs: Sequence[Cell]) -> list[float]:
    return sorted({c.tpot_slo_ms for c in cs})


def workload_order(workload: str) -> tuple[int, str]:
    """The four standard workloads in the paper's order, then any other (traces) by name."""
    return (WORKLOAD_ORDER.get(workload, len(WORKLOAD_ORDER)), workload)


def workloads(cs: Sequence[Cell]) -> list[str]:
    return sorted({c.workload for c in cs}, key=workload_order)


def peers(cs: Sequence[Cell], cell: Cell, same_rate: bool) -> list[Cell]:
    """The cells ``cell`` is compared with: same target, workload and setup (and rate,
    when the comparison is at the offered rate)."""
    return [
        c for c in cs
        if (_key_nan(c.tpot_slo_ms), c.workload, c.setup)
        == (_key_nan(cell.tpot_slo_ms), cell.workload, cell.setup)
        and (not same_rate or _key_nan(c.rate) == _key_nan(cell.rate))
    ]  # fmt: skip


def best_static(
    cs: Sequence[Cell], tpot: float, workload: str, of: Cell | None = None
) -> Cell | None:
    """The static policy with the highest mean goodput at this target and workload
    (and ``of``'s setup and rate, when given)."""
    pool = peers(cs, of, same_rate=True) if of is not None else cs
    static = [
        c for c in pool
        if c.tpot_slo_ms == tpot and c.workload == workload and is_baseline(c.policy)
        and not math.isnan(c.get("goodput"))
    ]  # fmt: skip
    return max(static, key=lambda c: c.get("goodput"), default=None)


def best_static_searched(cs: Sequence[Cell], of: Cell) -> Cell | None:
    """The static policy with the highest max goodput beside ``of`` (any offered rate:
    a search does not depend on it)."""
    static = [c for c in peers(cs, of, same_rate=False) if is_baseline(c.policy) and c.searched]
    return max(static, key=lambda c: c.max_goodput, default=None)
