"""The report's first section: the answer, as one figure and one compact table.

Which policy sustains the highest rate within SLO on each workload (and TPOT
target), by how much over the best policy of the other kind (static vs adaptive),
and under which truth and predictor. It ranks by maximum goodput where the runs
carry max-goodput searches (``goodput_search`` in ``run.json``) and says so;
otherwise by goodput at the offered rate, and says that this is a weaker answer. A
gap inside the searches' resolution or the spread over seeds is a tie, said so
(:mod:`.verdict`). Policies are named by short labels, their options in a legend
below the table. Runs planned on the oracle are called out: their figures are an
upper bound. Where an adaptive policy's maximum ends because its TPOT attainment
falls below the target (its planning margin crossed the TPOT edge), a note says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from servecal.reports.aggregate import Cell, cells, is_baseline, policy_order, workload_order
from servecal.reports.answer_figure import answer_figure
from servecal.reports.blocks import Block, Section, Table, Text, fmt
from servecal.reports.labels import full_labels, legend
from servecal.reports.loading import RunData
from servecal.reports.scheduling import max_goodput_text
from servecal.reports.verdict import verdict


def _groups(cs: Sequence[Cell]) -> list[list[Cell]]:
    """Cells that compete: same setup, TPOT target and workload (any offered rate)."""
    out: dict[tuple, list[Cell]] = {}
    for c in cs:
        tpot = None if math.isnan(c.tpot_slo_ms) else c.tpot_slo_ms
        out.setdefault((c.setup, workload_order(c.workload), tpot), []).append(c)
    return [out[k] for k in sorted(out, key=lambda k: (k[0], k[1], k[2] or 0.0))]


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


def margin_notes(cs: Sequence[Cell]) -> list[str]:
    """One note per adaptive policy naming the cells whose maximum ended where its TPOT
    attainment fell below the target: its planning margin, not TTFT, decided them."""
    where: dict[str, list[str]] = {}
    for cell in cs:
        if is_baseline(cell.policy):
            continue
        found = tpot_bound(cell)
        if found is not None:
            where.setdefault(cell.policy, []).append(
                f"{cell.workload} at {fmt(cell.tpot_slo_ms)} ms ({100 * found[1]:.1f}% "
                f"within TPOT at {fmt(found[0])} req/s)"
            )
    return [
        f"{policy}'s planning margin decided its maximum where its TPOT attainment fell "
        f"below the target first: {'; '.join(cells_)}."
        for policy, cells_ in where.items()
    ]


def _value_text(cell: Cell | None, searched: bool) -> str:
    if cell is None:
        return "—"
    return max_goodput_text(cell) if searched else fmt(cell.get("goodput"))


def answer_table(mine: Sequence[Cell], searched: bool, setup: str) -> Table:
    """One row per (workload, TPOT target): each policy's value and the verdict."""
    policies = sorted({c.policy for c in mine}, key=policy_order)
    rows = []
    for group in _groups(mine):
        by_policy = {c.policy: c for c in group}
        first = group[0]
        rows.append(
            (first.workload, fmt(first.tpot_slo_ms),
             *(_value_text(by_policy.get(p), searched) for p in policies),
             verdict(group, searched).text)
        )  # fmt: skip
    measure = "max goodput" if searched else "goodput"
    return Table(
        f"{measure.capitalize()} (req/s) by policy · {setup}",
        ("workload", "TPOT (ms)", *policies, "verdict"),
        tuple(rows),
        "",
    )


def _footnote(mine: Sequence[Cell], searched: bool, runs: Sequence[RunData]) -> str:
    seeds = sorted({len(c.runs) for c in mine})
    seed_text = "/".join(str(n) for n in seeds)
    how = (
        "Max goodput: the highest arrival rate at which at least 90% of requests meet both "
        "their TTFT and TPOT SLOs, searched per seed; '< floor': not even the search's lowest "
        "rate met it."
        if searched
        else "No max-goodput search in these runs (servecal compare --max-goodput): the "
        "values are goodput at the offered rate, which says less — at a rate every policy "
        "meets its SLOs, they tie."
    )
    return " ".join(
        part
        for part in (
            how,
            f"Mean ± standard deviation over {seed_text} seed(s).",
            "Verdict: the leader against the best policy of the other kind (static vs "
            "adaptive); a gap inside the searches' resolution or inside the two policies' "
            "spreads over seeds is a tie, not a ranking.",
            legend(full_labels(runs)),
        )
        if part
    )


def _setup_blocks(mine: Sequence[Cell], setup: str) -> list[Block]:
    """One setup's figure, table, footnote and (searched) margin notes; none without a
    value to draw."""
    searched = all(c.searched for c in mine)
    figure = answer_figure(mine, searched, setup)
    if figure is None:
        return []
    blocks: list[Block] = [figure, answer_table(mine, searched, setup)]
    blocks.append(Text(_footnote(mine, searched, [r for c in mine for r in c.runs])))
    return blocks + ([Text(n) for n in margin_notes(mine)] if searched else [])


def _oracle_warning(runs: Sequence[RunData]) -> Text | None:
    oracle = sorted({r.policy for r in runs if (r.predictor or "").split(":")[0] == "oracle"})
    if not oracle:
        return None
    return Text(
        "Warning: runs of "
        + ", ".join(oracle)
        + " planned on the oracle (the truth's own formula): their figures are what "
        "a perfect predictor would give, not what a calibrated table does."
    )


def answer_section(runs: Sequence[RunData]) -> Section | None:
    """The short answer over every run given; ``None`` when there is no run."""
    if not runs:
        return None
    cs = cells(runs)
    blocks: list[Block] = []
    for setup in dict.fromkeys(c.setup for c in cs):
        blocks += _setup_blocks([c for c in cs if c.setup == setup], setup)
    warning = _oracle_warning(runs)
    if warning is not None:
        blocks.append(warning)
    if not blocks:
        return None
    return Section("answer", "Answer", tuple(blocks))
