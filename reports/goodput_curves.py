"""SLO attainment against arrival rate, per policy: the curves a max-goodput search walks.

Every probe of a search (``run.json``'s ``goodput_search``: the rate and the share of
requests that met their SLOs there) is a point; a seed's probes, sorted by rate, are
one line. The maximum is the highest rate whose attainment stays at the target
(90%), so reading a policy's curve where it crosses the dashed line reads its
maximum. Runs without a search contribute their own (offered rate, attainment).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from servecal.reports import figures as F
from servecal.reports.aggregate import Cell, policy_order, workload_order
from servecal.reports.blocks import Figure, fmt

#: DistServe's attainment target, as the searches use it (drawn when a search has none).
TARGET = 0.9
#: At most this many panels per figure (the rest of a large grid is left out, said so).
MAX_PANELS = 12


def curve(cell: Cell) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per seed, its points ``(rates, attainments)`` sorted by rate: the search's probes,
    or the run's own rate when it was not searched."""
    out = []
    for run in cell.runs:
        search = run.search
        if search is not None and search.get("probes"):
            pts = sorted(
                (float(p["rate"]), float(p["attainment"]))
                for p in search["probes"]
                if p.get("attainment") is not None
            )
        elif not math.isnan(run.rate):
            pts = [(run.rate, float(run.summary.get("attainment", math.nan)))]
        else:
            pts = []
        if pts:
            rates, att = zip(*pts, strict=True)
            out.append((np.asarray(rates), np.asarray(att)))
    return out


def _panels(cs: Sequence[Cell]) -> list[tuple[str, float, str]]:
    keys = {(c.setup, c.tpot_slo_ms, c.workload) for c in cs}
    return sorted(keys, key=lambda k: (k[0], k[1], workload_order(k[2])))


def _curves(ax: Any, cells: Sequence[Cell], colours: dict[str, Any], target: float) -> float:
    """One panel's curves (a line per policy and seed, dotted at a measured max
    goodput); the attainment target its searches used (else ``target``)."""
    for cell in sorted(cells, key=lambda c: policy_order(c.policy)):
        colour = colours[cell.policy]
        for j, (rates, att) in enumerate(curve(cell)):
            label = cell.policy if j == 0 else None
            ax.plot(rates, 100 * att, "o-", color=colour, markersize=3, linewidth=1.0,
                    alpha=0.8, label=label)  # fmt: skip
        if cell.searched and cell.max_goodput_bound == "measured":
            ax.axvline(cell.max_goodput, color=colour, linewidth=0.8, linestyle=":")
        target = float(cell.searches[0].get("target", TARGET)) if cell.searches else target
    return target


def attainment_figure(cs: Sequence[Cell]) -> Figure | None:
    """One panel per (setup, TPOT target, workload), one colour per policy; ``None``
    when no cell has a rate to draw against."""
    drawable = [c for c in cs if curve(c)]
    if not drawable:
        return None
    panels = _panels(drawable)
    shown = panels[:MAX_PANELS]
    ncols = min(len({k[2] for k in shown}), 4) or 1
    nrows = math.ceil(len(shown) / ncols)
    colours = F.colour_map([c.policy for c in drawable])
    fig, axes = F.new_figure(nrows, ncols, width=4.2, height=3.0)
    target = TARGET
    for k, (setup, tpot, workload) in enumerate(shown):
        ax = axes[k // ncols, k % ncols]
        here = [
            c for c in drawable if (c.setup, c.tpot_slo_ms, c.workload) == (setup, tpot, workload)
        ]
        target = _curves(ax, here, colours, target)
        ax.axhline(100 * target, color="#57606a", linestyle="--", linewidth=1)
        tpot_text = "" if math.isnan(tpot) else f", TPOT {fmt(tpot)} ms"
        ax.set_title(f"{workload}{tpot_text}", fontsize=9)
        ax.set_xlabel("arrival rate (req/s)")
        ax.set_ylabel("requests within SLO (%)")
        ax.set_ylim(-3, 103)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    for k in range(len(shown), nrows * ncols):
        axes[k // ncols, k % ncols].set_visible(False)
    left_out = len(panels) - len(shown)
    setups = sorted({k[0] for k in shown})
    note = f" {left_out} more panels are left out." if left_out else ""
    return Figure(
        "SLO attainment against arrival rate",
        F.to_png(fig),
        "Each point is one run of a max-goodput search: the share of requests meeting both "
        "their TTFT and TPOT SLOs at that offered rate; one line per policy and seed. The "
        f"dashed line is the {100 * target:.0f}% target: a policy's maximum goodput is where "
        "its curve crosses it (dotted: the mean over seeds). Runs without a search show their "
        f"one offered rate. Setup: {'; '.join(setups)}.{note}",
    )
