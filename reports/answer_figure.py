"""The answer as one figure: each policy's highest rate within SLO, per workload and target.

One panel per TPOT target, one group of bars per workload, one bar per policy (its
colour the same in every panel), the spread over seeds as an error bar. The y axis
is logarithmic: a CPU demo's workloads differ tenfold in what they sustain, and on a
linear axis the `long` bars would be invisible. A policy that sustained nothing (its
search ended below its floor) is drawn as a cross on the axis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator

from servecal.reports import figures as F
from servecal.reports.aggregate import Cell, policy_order, workload_order
from servecal.reports.blocks import Figure, fmt
from servecal.reports.verdict import score


def _bars(
    ax: Any,
    scores: Sequence[Any],
    loads: Sequence[str],
    policies: Sequence[str],
    colours: dict[str, Any],
    floor: float,
) -> None:
    """One panel: a bar per (workload, policy) above ``floor``, a cross on the axis for
    a policy that sustained no load, a whisker of one standard deviation."""
    width = 0.8 / len(policies)
    for k, policy in enumerate(policies):
        mine = {s.cell.workload: s for s in scores if s.cell.policy == policy}
        x = np.arange(len(loads)) + (k - (len(policies) - 1) / 2) * width
        for i, w in enumerate(loads):
            s = mine.get(w)
            if s is None:
                continue
            if not s.sustains:
                ax.plot(x[i], floor, "x", color=colours[policy], markersize=6)
                continue
            ax.bar(x[i], s.value - floor, width, bottom=floor, color=colours[policy],
                   hatch="//" if s.bound == "above_cap" else None)  # fmt: skip
            if s.spread > 0:
                low = max(floor, s.value - s.spread)
                ax.errorbar(x[i], s.value, yerr=[[s.value - low], [s.spread]],
                            color="#1d2330", linewidth=0.8, capsize=2)  # fmt: skip


def _style(ax: Any, tpot: float, loads: Sequence[str], floor: float, searched: bool) -> None:
    """A panel's log axis from ``floor``, workload ticks, TPOT title and labels."""
    F.log_axis(ax, "y")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylim(bottom=floor)
    ax.set_xticks(np.arange(len(loads)), loads)
    ax.set_title("" if math.isnan(tpot) else f"TPOT target {fmt(tpot)} ms", fontsize=10)
    ax.set_ylabel("max goodput (req/s)" if searched else "goodput (req/s)")
    ax.grid(alpha=0.3, axis="y")


def _labels(scores: Sequence[Any]) -> tuple[list[float], list[str], list[str]]:
    """The TPOT targets (panels; none last), workloads (ticks) and policies (bars), in
    the report's order."""
    tpots = sorted({s.cell.tpot_slo_ms for s in scores}, key=lambda t: (math.isnan(t), t))
    loads = sorted({s.cell.workload for s in scores}, key=workload_order)
    policies = sorted({s.cell.policy for s in scores}, key=policy_order)
    return tpots, loads, policies


def answer_figure(cs: Sequence[Cell], searched: bool, setup: str) -> Figure | None:
    """Bars of every cell of one setup; ``None`` when no cell has a value."""
    scores = [s for s in (score(c, searched) for c in cs) if not math.isnan(s.value)]
    if not scores:
        return None
    tpots, loads, policies = _labels(scores)
    colours = F.colour_map(policies)
    positive = [s.value for s in scores if s.sustains]
    floor = 0.5 * min(positive) if positive else 1.0
    fig, axes = F.new_figure(1, len(tpots), width=4.2, height=3.2)
    for j, tpot in enumerate(tpots):
        ax = axes[0, j]
        panel = [s for s in scores if s.cell.tpot_slo_ms == tpot]
        _bars(ax, panel, loads, policies, colours, floor)
        _style(ax, tpot, loads, floor, searched)
    handles = [Patch(color=colours[p], label=p) for p in policies]
    fig.subplots_adjust(bottom=1.05 / 3.2)  # room for the legend under the panels
    fig.legend(handles=handles, loc="lower center", ncol=len(policies), fontsize=9,
               frameon=False)  # fmt: skip
    measure = "the highest arrival rate with ≥ 90% of requests within both SLOs"
    return Figure(
        "Highest rate within SLO, by policy",
        F.to_png(fig),
        f"Each bar: {measure if searched else 'goodput at the offered rate'}, mean over seeds; "
        "the whisker is one standard deviation over seeds; a cross on the axis: the policy "
        f"sustained no load its search tried; hatched: above the search's cap. Log scale. "
        f"Setup: {setup}.",
    )
