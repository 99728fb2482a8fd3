"""The report's first section: the short answer.

Which policy sustains the highest rate within SLO on each workload (and TPOT
target), by how much over the best static policy, and under which truth and
predictor. It ranks by maximum goodput where the runs carry max-goodput searches
(``goodput_search`` in ``run.json``) and says so; otherwise by goodput at the
offered rate, and says that this is a weaker answer. Runs planned on the oracle
(the truth's own formula) are called out: their figures are an upper bound. Where
an adaptive policy's maximum ends because its TPOT attainment falls below the
target (its planning margin crossed the TPOT edge, not TTFT), the line says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from servecal.reports.aggregate import (
    Cell,
    best_static,
    best_static_searched,
    cells,
    is_baseline,
    workload_order,
)
from servecal.reports.blocks import Section, Table, Text, fmt
from servecal.reports.loading import RunData
from servecal.reports.scheduling import max_goodput_text

#: A ratio within this of 1 is a tie when the searches do not say their own tolerance
#: (they stop within 2% of the crossing by default).
TIE = 0.02


def _groups(cs: Sequence[Cell]) -> list[list[Cell]]:
    """Cells that compete: same setup, TPOT target and workload (any offered rate)."""
    out: dict[tuple, list[Cell]] = {}
    for c in cs:
        tpot = None if math.isnan(c.tpot_slo_ms) else c.tpot_slo_ms
        out.setdefault((c.setup, workload_order(c.workload), tpot), []).append(c)
    return [out[k] for k in sorted(out, key=lambda k: (k[0], k[1], k[2] or 0.0))]


def _value(cell: Cell, searched: bool) -> float:
    if searched:
        return cell.max_goodput if cell.max_goodput_bound != "below_floor" else 0.0
    return cell.get("goodput")


def _resolution(*cs: Cell) -> float:
    """How close two maxima can be and still tie: the searches' own stopping tolerance."""
    tols = [float(s.get("bracket", {}).get("rel_tol", TIE)) for c in cs for s in c.searches]
    return max(tols, default=TIE)


def _rival(top: Cell, ranked: list[Cell], searched: bool, cs: Sequence[Cell]) -> tuple:
    """What the leader is measured against: the best static policy when an adaptive one
    leads, else the best adaptive one; ``(cell or None, how it is named)``."""
    if is_baseline(top.policy):
        return next((c for c in ranked[1:] if not is_baseline(c.policy)), None), "the best adaptive"
    if searched:
        return best_static_searched(cs, top), "the best static"
    return best_static(cs, top.tpot_slo_ms, top.workload, of=top), "the best static"


def tpot_bound(cell: Cell) -> tuple[float, float] | None:
    """``(rate, TPOT attainment)``, means over seeds, of the lowest rate each seed's
    search failed at, when TPOT alone missed the target there (else ``None``: the
    maximum was set by TTFT, or by both together, or was not searched)."""
    rates, tpots, targets = [], [], []
    for search in cell.searches:
        target = float(search.get("target", 0.9))
        top = float(search.get("max_goodput", 0.0))
        failing = [
            p for p in search.get("probes", ())
            if p.get("attainment") is not None and p["attainment"] < target and p["rate"] > top
        ]  # fmt: skip
        if not failing:
            return None
        first = min(failing, key=lambda p: p["rate"])
        if first.get("tpot_attainment") is None:
            return None
        rates.append(float(first["rate"]))
        tpots.append(float(first["tpot_attainment"]))
        targets.append(target)
    if not tpots or not sum(tpots) / len(tpots) < min(targets):
        return None
    return sum(rates) / len(rates), sum(tpots) / len(tpots)


def _margin_note(cells: Sequence[Cell | None]) -> str:
    """``; the margin decided …`` for the adaptive cells whose maximum TPOT ended."""
    notes, seen = [], set()
    for cell in cells:
        if cell is None or id(cell) in seen or is_baseline(cell.policy):
            continue
        seen.add(id(cell))
        found = tpot_bound(cell)
        if found is not None:
            notes.append(
                f"{cell.policy}'s maximum is where its TPOT attainment falls below the "
                f"target ({100 * found[1]:.1f}% at {fmt(found[0])} req/s; its maximum "
                f"{max_goodput_text(cell)}): its planning margin decided it"
            )
    return "".join(f"; {n}" for n in notes)


def _line(group: list[Cell], searched: bool, cs: Sequence[Cell]) -> tuple[str, tuple] | None:
    ranked = sorted(
        (c for c in group if not math.isnan(_value(c, searched))),
        key=lambda c: _value(c, searched),
        reverse=True,
    )
    if not ranked:
        return None
    top = ranked[0]
    show = max_goodput_text if searched else (lambda c: fmt(c.get("goodput")))
    tpot = "" if math.isnan(top.tpot_slo_ms) else f" at TPOT {fmt(top.tpot_slo_ms)} ms"
    measure = "req/s within SLO" if searched else f"req/s of goodput at {fmt(top.rate)} req/s"
    text = f"{top.workload}{tpot}: {top.policy} sustains the most, {show(top)} {measure}"
    rival, kind = _rival(top, ranked, searched, cs)
    ratio_cell, rival_cell = "—", "—"
    if rival is not None and _value(rival, searched) > 0:
        rival_cell = f"{rival.policy} ({show(rival)})"
        bounds = {top.max_goodput_bound, rival.max_goodput_bound} if searched else set()
        if bounds - {"measured"}:
            ratio_cell = "bound"
            text += f"; {kind} is {rival_cell} (a search hit its cap: no ratio)"
        else:
            ratio = _value(top, searched) / _value(rival, searched)
            ratio_cell = f"{ratio:.3f}×"
            if abs(ratio - 1.0) <= _resolution(top, rival):
                text += f"; it ties with {kind}, {rival_cell}: {ratio:.3f}×"
                text += ", within the search's resolution"
            else:
                text += f"; {ratio:.2f}× {kind}, {rival_cell}"
    if searched:
        text += _margin_note((top, rival, *ranked))  # every adaptive one in the cell
    seeds = len(top.runs)
    text += f" ({seeds} seed{'s' if seeds != 1 else ''})."
    row = (top.workload, fmt(top.tpot_slo_ms), top.policy, show(top), rival_cell, ratio_cell,
           str(seeds))  # fmt: skip
    return text, row


def answer_section(runs: Sequence[RunData]) -> Section | None:
    """The short answer over every run given; ``None`` when there is no run."""
    if not runs:
        return None
    cs = cells(runs)
    blocks: list = []
    for setup in dict.fromkeys(c.setup for c in cs):
        mine = [c for c in cs if c.setup == setup]
        searched = all(c.searched for c in mine)
        lines, rows = [], []
        for group in _groups(mine):
            found = _line(group, searched, mine)
            if found is not None:
                lines.append(found[0])
                rows.append(found[1])
        if not rows:
            continue
        how = (
            "Ranked by maximum goodput: the highest arrival rate at which at least 90% of "
            "requests meet both their TTFT and TPOT SLOs, searched per seed."
            if searched
            else "No max-goodput search in these runs (servecal compare --max-goodput): ranked "
            "by goodput at the offered rate, which says less — at a rate every policy meets "
            "its SLOs, they tie."
        )
        blocks.append(Text(f"Under {setup}. {how}"))
        blocks.extend(Text(line) for line in lines)
        measure = "max goodput (req/s)" if searched else "goodput (req/s)"
        blocks.append(
            Table(
                f"Highest rate within SLO · {setup}",
                (
                    "workload",
                    "TPOT target (ms)",
                    "best policy",
                    measure,
                    "compared with",
                    "ratio",
                    "seeds",
                ),
                tuple(rows),
                "Compared with: the best static policy when an adaptive one leads, the best "
                "adaptive one when a static one does. A ratio within the searches' "
                "tolerance of 1 (they stop within 1-2% of the crossing) is a tie.",
            )  # fmt: skip
        )
    oracle = sorted({r.policy for r in runs if (r.predictor or "").split(":")[0] == "oracle"})
    if oracle:
        blocks.append(
            Text(
                "Warning: runs of "
                + ", ".join(oracle)
                + " planned on the oracle (the truth's own formula): their figures are what "
                "a perfect predictor would give, not what a calibrated table does."
            )
        )
    if not blocks:
        return None
    return Section("answer", "Answer", tuple(blocks))
