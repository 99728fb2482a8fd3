"""Energy section: joules per good request and per output token, next to goodput.

Energy per *good* request (device energy of the whole run divided by the requests
that met both SLOs) is servecal's definition, not ML.ENERGY's per-token one; both
are shown. Each row names its energy source, and runs whose sources differ are
never averaged together: the source is part of the grouping key.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from servecal.reports import figures as F
from servecal.reports.aggregate import policy_order, workload_order
from servecal.reports.blocks import Figure, Section, Table, Text, fmt
from servecal.reports.loading import ENERGY_SOURCES, RunData, energy_source_name

SAMPLES_SOURCE = ENERGY_SOURCES["samples"]

#: docs/spec.md §1 GPU figures (J per good request), shown when a run's setting matches.
REFERENCE = (
    # device, model, workload, TPOT target, baseline J, SLOWeave J, baseline name
    ("A100", "llama-3-8b", "mixed", 25.0, 18.7, 12.4, "runtime default"),
    ("H100", "llama-3-70b", "long", 25.0, 92.6, 58.5, "runtime default (TP8)"),
)


@dataclass(frozen=True)
class EnergyRow:
    tpot_slo_ms: float
    workload: str
    policy: str
    source: str
    goodput: float
    j_per_good_request: float
    j_per_token: float
    seeds: int


def _run_energy(run: RunData) -> tuple[float, float]:
    """(J per good request, J per output token) of one run; NaN without energy."""
    if run.energy_source == "unavailable":
        return math.nan, math.nan
    per_good = run.summary.get("energy_per_good_request_j")
    per_token = run.summary.get("energy_per_output_token_j")
    return (
        math.nan if per_good is None else float(per_good),
        math.nan if per_token is None else float(per_token),
    )


def energy_rows(runs: Sequence[RunData]) -> list[EnergyRow]:
    """Means over seeds per (target, workload, policy, energy source)."""
    groups: dict[tuple[float, str, str, str], list[RunData]] = {}
    for run in runs:
        key = (run.tpot_slo_ms, run.workload, run.policy, run.energy_source)
        groups.setdefault(key, []).append(run)
    rows = []
    for (tpot, w, p, source), members in groups.items():
        per = np.array([_run_energy(r) for r in members], dtype=float).reshape(-1, 2)
        goodput = np.array([float(r.summary.get("goodput", math.nan)) for r in members])
        rows.append(
            EnergyRow(
                tpot, w, p, source,
                float(np.mean(goodput)),
                float(np.mean(per[:, 0])),
                float(np.mean(per[:, 1])),
                len(members),
            )
        )  # fmt: skip
    rows.sort(
        key=lambda r: (r.tpot_slo_ms, workload_order(r.workload), policy_order(r.policy), r.source)
    )
    return rows


@dataclass(frozen=True)
class RankRow:
    """One policy's energy and goodput in one (target, workload, energy source, rate):
    at the run's own rate (common to the policies of a compare) and, when searched, at
    its own maximum goodput (the search's probe at that rate)."""

    tpot_slo_ms: float
    workload: str
    source: str
    rate: float
    policy: str
    goodput: float
    j_at_rate: float
    max_goodput: float
    bound: str
    j_at_max: float
    seeds: int


def energy_at_max(search: dict) -> float:
    """J per good request of a search's probe at its maximum (NaN for a bound or
    when the probe recorded no energy)."""
    if search.get("bound", "measured") != "measured":
        return math.nan
    best = search.get("max_goodput")
    for probe in search.get("probes") or ():
        if probe.get("rate") == best:
            value = probe.get("energy_per_good_request_j")
            return math.nan if value is None else float(value)
    return math.nan


def _mean(values: Sequence[float]) -> float:
    """Mean over seeds, NaN unless every seed has the number (a partial mean lies)."""
    a = np.asarray(values, dtype=float)
    return float(a.mean()) if a.size and not np.isnan(a).any() else math.nan


def _rank_row(key: tuple, members: Sequence[RunData]) -> RankRow:
    """One group's means over seeds (its max goodput only when every seed searched)."""
    tpot, w, source, rate, policy = key
    searches = [r.search for r in members]
    searched = all(s is not None for s in searches)
    bounds = {s.get("bound", "measured") for s in searches if s is not None}
    return RankRow(
        tpot, w, source, math.nan if rate is None else rate, policy,
        _mean([float(r.summary.get("goodput", math.nan)) for r in members]),
        _mean([_run_energy(r)[0] for r in members]),
        _mean([float(s["max_goodput"]) for s in searches]) if searched else math.nan,  # type: ignore[index]
        ("measured" if bounds <= {"measured"} else "bound") if searched else "",
        _mean([energy_at_max(s) for s in searches]) if searched else math.nan,  # type: ignore[arg-type]
        len(members),
    )  # fmt: skip


def rank_rows(runs: Sequence[RunData]) -> list[RankRow]:
    """Means over seeds per (target, workload, energy source, rate, policy)."""
    groups: dict[tuple, list[RunData]] = {}
    for run in runs:
        rate = None if math.isnan(run.rate) else run.rate
        key = (run.tpot_slo_ms, run.workload, run.energy_source, rate, run.policy)
        groups.setdefault(key, []).append(run)
    rows = [_rank_row(key, members) for key, members in groups.items()]
    rows.sort(
        key=lambda r: (
            r.tpot_slo_ms,
            workload_order(r.workload),
            r.source,
            0.0 if math.isnan(r.rate) else r.rate,
            policy_order(r.policy),
        )
    )
    return rows


def ranks(values: Sequence[float], higher_is_better: bool) -> list[int | None]:
    """1 for the best of ``values``; ties share a rank; NaN has none."""
    present = sorted({v for v in values if not math.isnan(v)}, reverse=higher_is_better)
    place = {v: i + 1 for i, v in enumerate(present)}
    return [None if math.isnan(v) else place[v] for v in values]


def _ranked(value: float, rank: int | None, digits: int = 3) -> str:
    return "—" if rank is None else f"{fmt(value, digits)} ({rank})"


def ranking_table(runs: Sequence[RunData]) -> Table | None:
    """Policies ranked by goodput and by J per good request, at the common rate and at
    each one's own maximum goodput; ranks within one target, workload, source and rate."""
    rows = rank_rows(runs)
    if not rows:
        return None
    groups: dict[tuple, list[RankRow]] = {}
    for r in rows:
        groups.setdefault((r.tpot_slo_ms, r.workload, r.source, r.rate), []).append(r)
    out = []
    for members in groups.values():
        g_rank = ranks([r.goodput for r in members], True)
        e_rank = ranks([r.j_at_rate for r in members], False)
        m_rank = ranks([r.max_goodput if r.bound == "measured" else math.nan for r in members],
                       True)  # fmt: skip
        x_rank = ranks([r.j_at_max for r in members], False)
        for i, r in enumerate(members):
            max_text = "—" if not r.bound else (
                _ranked(r.max_goodput, m_rank[i]) if r.bound == "measured" else "bound"
            )  # fmt: skip
            out.append(
                (fmt(r.tpot_slo_ms), r.workload, r.source, fmt(r.rate), r.policy,
                 _ranked(r.goodput, g_rank[i]), _ranked(r.j_at_rate, e_rank[i]),
                 max_text, _ranked(r.j_at_max, x_rank[i]), str(r.seeds))
            )  # fmt: skip
    return Table(
        "Ranking: goodput and energy per good request",
        ("TPOT target (ms)", "workload", "energy source", "common rate (req/s)", "policy",
         "goodput at the rate (rank)", "J/good request at the rate (rank)",
         "max goodput (rank)", "J/good request at its max goodput (rank)", "seeds"),
        tuple(out),
        "Ranks (in brackets, 1 = best: most goodput, fewest joules) are within one TPOT "
        "target, workload, energy source and rate. 'At its max goodput': the run of that "
        "policy's own max-goodput search at the rate it found (compare --max-goodput), so "
        "each policy is priced at its own highest load meeting 90% attainment. '—': no "
        "energy, not searched, or a search that ended at a bound.",
    )  # fmt: skip


def workloads_from(rows: Sequence[EnergyRow]) -> list[str]:
    return sorted({r.workload for r in rows}, key=workload_order)


def _figure(rows: Sequence[EnergyRow], tpot: float) -> Figure | None:
    chosen = [r for r in rows if r.tpot_slo_ms == tpot and not math.isnan(r.j_per_good_request)]
    if not chosen:
        return None
    ws = workloads_from(chosen)
    colours = F.colour_map([r.policy for r in rows])
    fig, axes = F.new_figure(1, len(ws), width=4.0, height=3.4)
    for j, w in enumerate(ws):
        ax = axes[0, j]
        for r in (r for r in chosen if r.workload == w):
            ax.scatter(
                r.goodput, r.j_per_good_request, color=colours[r.policy], label=r.policy, s=30
            )
        ax.set_title(w)
        ax.set_xlabel("goodput (req/s)")
        ax.set_ylabel("energy per good request (J)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return Figure(
        f"Energy per good request vs goodput, TPOT target {fmt(tpot)} ms",
        F.to_png(fig),
        "One point per policy (mean over seeds); down and to the right is better.",
    )


def modelled_setting(runs: Sequence[RunData]) -> tuple[str, str]:
    """``(gpu, model)`` of the power model every run was priced by (``model:NAME``
    sources, sched/power.py), else ``("", "")``: a simulated A100 Llama-3-8B run is
    that setting's, modelled, for the published figures' table."""
    names = {str(r.meta.get("energy_source", "")) for r in runs}
    if len(names) != 1 or not (name := names.pop()).startswith("model:"):
        return "", ""
    from servecal.sched.power import load_power_model
    from servecal.util.errors import InputError

    try:
        setting = load_power_model(name[6:]).meta.get("setting") or {}
    except InputError:  # a model this installation does not have: no setting to claim
        return "", ""
    return str(setting.get("gpu", "")), str(setting.get("model", ""))


def reference_table(runs: Sequence[RunData], device: str, model: str) -> Table:
    settings = {(r.workload, r.tpot_slo_ms) for r in runs}
    rows = []
    for dev, mdl, w, tpot, base, ours, base_name in REFERENCE:
        match = dev.lower() in device.lower() and mdl == model.lower() and (w, tpot) in settings
        rows.append(
            (f"{dev}, {mdl}, {w}, {fmt(tpot)} ms", base_name, fmt(base), fmt(ours),
             "yes" if match else "no")
        )  # fmt: skip
    return Table(
        "Reference: docs/spec.md §1 GPU figures (J per good request)",
        ("setting", "baseline", "baseline J/good req", "SLOWeave J/good req",
         "matches this report's setting"),
        tuple(rows),
        "Published figures (SLOWeave's, docs/spec.md §1), not measured here; compare only where "
        "the last column says yes.",
    )  # fmt: skip


def energy_section(
    runs: Sequence[RunData], device: str = "", model: str = "", sample_meter: str | None = None
) -> Section:
    """The Energy section; ``device``/``model`` select matching reference figures.

    ``sample_meter`` is the meter of the one calibration whose samples a simulation
    bootstrapped (its fingerprint's ``energy_source``), named next to that source.
    """
    if not runs:
        return Section("energy", "Energy", (Text("No run folder was given."),))
    if not device and not model:
        device, model = modelled_setting(runs)
    rows = energy_rows(runs)
    if sample_meter:
        meter = energy_source_name(sample_meter)
        rows = [
            replace(r, source=f"{r.source} ({meter})") if r.source == SAMPLES_SOURCE else r
            for r in rows
        ]
    sources = sorted({r.source for r in rows})
    blocks: list = [
        Text(
            "Energy per good request is the device energy of the whole run divided by the number "
            "of requests that met both their TTFT and TPOT SLOs: servecal's definition (ML.ENERGY "
            "reports energy per token, shown too). Energy source(s) in this report: "
            + "; ".join(sources)
            + ". Rows with different sources are never averaged together."
            + (
                " Modelled energy is a power model's watts (docs/energy.md: fitted from "
                "Splitwise's and ML.ENERGY's A100 measurements) times this run's iteration "
                "times, idle gaps at idle power: an estimate, not a measurement."
                if any(src.startswith("modelled") for src in sources)
                else ""
            )
        ),
        Table(
            "Energy per policy",
            (
                "TPOT target (ms)",
                "workload",
                "policy",
                "goodput (req/s)",
                "J per good request",
                "J per output token",
                "energy source",
                "seeds",
            ),
            tuple(
                (
                    fmt(r.tpot_slo_ms),
                    r.workload,
                    r.policy,
                    fmt(r.goodput),
                    fmt(r.j_per_good_request),
                    fmt(r.j_per_token, 3),
                    r.source,
                    str(r.seeds),
                )
                for r in rows
            ),
            "'—' where the run had no energy meter, or no request met its SLOs.",
        ),  # fmt: skip
    ]
    ranking = ranking_table(runs)
    if ranking is not None:
        blocks.append(ranking)
    for tpot in sorted({r.tpot_slo_ms for r in rows}):
        fig = _figure(rows, tpot)
        if fig is not None:
            blocks.append(fig)
    blocks.append(reference_table(runs, device, model))
    return Section("energy", "Energy", tuple(blocks))
