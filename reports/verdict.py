"""Who leads one competing group (a workload at a TPOT target), or whether it is a tie.

A leader is only named when its lead is larger than what the runs can resolve: the
searches' own stopping tolerance, and the spread over seeds. Two policies whose
maxima are 66.9 ± 48 and 41.8 ± 4.3 req/s are not ranked: the spread (±52 together)
is wider than the gap (25), so the answer says "tie within noise".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servecal.reports.aggregate import Cell, is_baseline
from servecal.reports.blocks import fmt

#: A ratio within this of 1 is a tie when the searches do not say their own tolerance
#: (they stop within 2% of the crossing by default).
TIE = 0.02


@dataclass(frozen=True)
class Score:
    """One cell's value in the answer: mean over seeds, their standard deviation, and
    ``measured`` / ``above_cap`` / ``below_floor`` (a search that hit a limit)."""

    cell: Cell
    value: float
    spread: float
    bound: str = "measured"

    @property
    def sustains(self) -> bool:
        return self.value > 0 and self.bound != "below_floor"


def score(cell: Cell, searched: bool) -> Score:
    """The cell's maximum goodput (searched) or goodput at its offered rate."""
    if not searched:
        sd = cell.spread.get("goodput", 0.0)
        return Score(cell, cell.get("goodput"), 0.0 if math.isnan(sd) else sd)
    values = [float(s["max_goodput"]) for s in cell.searches]
    sd = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    bound = cell.max_goodput_bound
    return Score(cell, 0.0 if bound == "below_floor" else cell.max_goodput, sd, bound)


def resolution(*cs: Cell) -> float:
    """How close two maxima can be and still tie: the searches' own stopping tolerance."""
    tols = [float(s.get("bracket", {}).get("rel_tol", TIE)) for c in cs for s in c.searches]
    return max(tols, default=TIE)


@dataclass(frozen=True)
class Verdict:
    """What the answer says of one group: ``text`` for its table cell, the leader and
    the rival it is measured against (best policy of the other kind), and whether the
    two are a tie."""

    text: str
    leader: Score | None = None
    rival: Score | None = None
    tie: bool = False


def _rival(top: Score, ranked: Sequence[Score]) -> Score | None:
    """The best policy of the other kind: static when an adaptive one leads, else adaptive."""
    static = is_baseline(top.cell.policy)
    return next((s for s in ranked if is_baseline(s.cell.policy) != static), None)


def verdict(group: Sequence[Cell], searched: bool) -> Verdict:
    """The leader of ``group`` over the best policy of the other kind, or a tie."""
    ranked = sorted(
        (s for s in (score(c, searched) for c in group) if not math.isnan(s.value)),
        key=lambda s: s.value,
        reverse=True,
    )
    if not ranked:
        return Verdict("no result")
    if not any(s.sustains for s in ranked):
        return Verdict("none sustains load (every search ended below its floor)")
    top = ranked[0]
    rival = _rival(top, ranked)
    name = top.cell.policy
    if rival is None:
        return Verdict(f"{name} leads", top)
    other = rival.cell.policy
    if not rival.sustains:
        return Verdict(f"{name} leads; {other} sustains none", top, rival)
    if top.bound == "above_cap":
        tie = rival.bound == "above_cap"
        text = "tie: both reach the search's cap" if tie else f"{name} leads (reached the cap)"
        return Verdict(text, top, rival, tie)
    gap, ratio = top.value - rival.value, top.value / rival.value
    if gap <= resolution(top.cell, rival.cell) * top.value:
        within = f"{ratio:.2f}×, within the search's resolution"
        return Verdict(f"tie: {name} ≈ {other} ({within})", top, rival, True)
    spread = top.spread + rival.spread
    if gap <= spread:
        noise = f"gap {fmt(gap)} < spread ±{fmt(spread)}"
        return Verdict(f"tie within noise: {name} ≈ {other} ({noise})", top, rival, True)
    return Verdict(f"{name} leads, {ratio:.2f}× {other}", top, rival)
