"""Scheduling section: attainment against rate, the docs/spec.md §1 table per TPOT target, ratios
(by max goodput when searched), distributions, timelines.

Numbers are means over seeds (± their standard deviation) of each run's summary;
distribution plots pool the per-request figures of all seeds of a cell.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from servecal.reports import figures as F
from servecal.reports.aggregate import (
    Cell,
    best_static,
    best_static_searched,
    cells,
    is_baseline,
    policy_order,
    setups,
    targets,
    workload_order,
    workloads,
)
from servecal.reports.blocks import Figure, Section, Table, Text, fmt, pct
from servecal.reports.goodput_curves import attainment_figure
from servecal.reports.loading import RunData

MAX_TIMELINE_POINTS = 4000


def _recomputes(c: Cell) -> float:
    """Recompute preemptions per seed (a run without "recomputes" counts them as "preemptions")."""
    value = c.get("recomputes")
    return c.get("preemptions") if math.isnan(value) else value


def _pm(cell: Cell, key: str, scale: float = 1.0, percent: bool = False) -> str:
    mean = cell.get(key)
    if math.isnan(mean):
        return "—"
    sd = cell.spread.get(key, math.nan)
    main = pct(mean) if percent else fmt(mean * scale)
    if len(cell.runs) < 2 or math.isnan(sd) or sd == 0:
        return main
    return f"{main} ± {pct(sd) if percent else fmt(sd * scale, 2)}"


def _ratio(cell: Cell, cs: Sequence[Cell]) -> str:
    best = best_static(cs, cell.tpot_slo_ms, cell.workload, of=cell)
    if best is None or best.get("goodput") <= 0:
        return "—"
    return f"{cell.get('goodput') / best.get('goodput'):.2f}×"


def max_goodput_text(cell: Cell) -> str:
    """The searched maximum as a cell: ``58.4 ± 0.3``, ``> CAP``, ``< floor`` or ``—``."""
    if not cell.searched:
        return "—"
    bound = cell.max_goodput_bound
    if bound == "above_cap":
        cap = max(float(s["max_goodput"]) for s in cell.searches)
        return f"> {fmt(cap)}"
    if bound == "below_floor":
        return "< floor"
    values = [float(s["max_goodput"]) for s in cell.searches]
    sd = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return fmt(cell.max_goodput) + (f" ± {fmt(sd, 2)}" if sd > 0 else "")


def _searched_ratio(cell: Cell, cs: Sequence[Cell]) -> str:
    best = best_static_searched(cs, cell)
    if best is None or not cell.searched or best.max_goodput <= 0:
        return "—"
    bounds = (cell.max_goodput_bound, best.max_goodput_bound)
    if "above_cap" in bounds or "below_floor" in bounds:
        return "bound"
    return f"{cell.max_goodput / best.max_goodput:.3f}×"


def _target_table(cs: Sequence[Cell], tpot: float, setup: str, several: bool) -> Table:
    here = [c for c in cs if c.tpot_slo_ms == tpot and c.setup == setup]
    searched = any(c.searched for c in here)
    rows = tuple(
        (
            c.workload,
            c.policy,
            _pm(c, "goodput"),
            _pm(c, "attainment", percent=True),
            _pm(c, "p99_ttft_ms"),
            _pm(c, "p99_tpot_ms"),
            _ratio(c, cs),
            str(len(c.runs)),
            "trace" if math.isnan(c.rate) else fmt(c.rate),
            *((max_goodput_text(c), _searched_ratio(c, cs)) if searched else ()),
        )
        for c in here
    )
    columns = ("workload", "policy", "goodput (req/s)", "SLO attainment", "P99 TTFT (ms)",
               "P99 TPOT (ms)", "goodput / best static", "seeds",
               "offered rate (req/s)")  # fmt: skip
    if searched:
        columns += ("max goodput (req/s)", "max goodput / best static")
    return Table(
        f"TPOT target {fmt(tpot)} ms" + (f" · {setup}" if several else ""),
        columns,
        rows,
        "Goodput counts requests meeting both TTFT and TPOT SLOs per second of run, at the "
        "offered rate; TPOT is each request's own P99 inter-token gap, aggregated over "
        "requests (docs/spec.md, Words). Max goodput: the highest rate with ≥ 90% of requests "
        "within SLO, searched per seed. Mean ± standard deviation over seeds. "
        f"Setup: {setup}.",
    )


def _ratio_table(cs: Sequence[Cell]) -> Table | None:
    """Each adaptive policy beside the best static policy of its cell, named: by max
    goodput where the cells were searched, else by goodput at the offered rate."""
    rows = []
    searched_any = False
    for cell in sorted(cs, key=lambda c: (policy_order(c.policy), c.tpot_slo_ms, c.setup,
                                          workload_order(c.workload))):  # fmt: skip
        if is_baseline(cell.policy):
            continue
        best_mg = best_static_searched(cs, cell) if cell.searched else None
        if best_mg is not None:
            searched_any = True
            rows.append((cell.policy, fmt(cell.tpot_slo_ms), cell.workload, best_mg.policy,
                         max_goodput_text(best_mg), max_goodput_text(cell),
                         _searched_ratio(cell, cs), "max goodput", cell.setup))  # fmt: skip
            continue
        best = best_static(cs, cell.tpot_slo_ms, cell.workload, of=cell)
        if best is None:
            continue
        rows.append((cell.policy, fmt(cell.tpot_slo_ms), cell.workload, best.policy,
                     fmt(best.get("goodput")), fmt(cell.get("goodput")), _ratio(cell, cs),
                     f"goodput at {fmt(cell.rate)} req/s", cell.setup))  # fmt: skip
    if not rows:
        return None
    return Table(
        "Ratio to the best static policy",
        ("policy", "TPOT target (ms)", "workload", "best static", "its value (req/s)",
         "value (req/s)", "ratio", "measure", "setup"),
        tuple(rows),
        "Best static = the fixed-chunk, token-budget or full-prefill policy with the highest "
        "mean value at that target, workload and setup. The measure is max goodput (the "
        "highest rate with ≥ 90% within SLO) where the runs carry a search"
        + (", else" if searched_any else ";") + " goodput at the offered rate.",
    )  # fmt: skip


def _ttft_ms(run: RunData) -> np.ndarray:
    r = run.requests
    return (r["first_token_ms"] - r["arrival_ms"]).to_numpy(dtype=float)


def _distribution_figure(cs: Sequence[Cell], tpot: float) -> Figure:
    ws = workloads(cs)
    colours = F.colour_map([c.policy for c in cs])
    fig, axes = F.new_figure(2, len(ws), width=4.2, height=3.2)
    for j, w in enumerate(ws):
        for c in (c for c in cs if c.tpot_slo_ms == tpot and c.workload == w):
            ttft = np.concatenate([_ttft_ms(r) for r in c.runs])
            tpot_req = np.concatenate([r.requests["tpot_p99_ms"].to_numpy(float) for r in c.runs])
            F.ecdf(axes[0, j], ttft, c.policy, colours[c.policy])
            F.ecdf(axes[1, j], tpot_req, c.policy, colours[c.policy])
        axes[0, j].set_title(f"{w}")
        F.log_axis(axes[0, j], "x")
        axes[0, j].set_xlabel("TTFT (ms, log)")
        axes[1, j].axvline(tpot, color="#57606a", linestyle="--", linewidth=1)
        axes[1, j].set_xlabel("request P99 TPOT (ms)")
        for i in (0, 1):
            axes[i, j].set_ylabel("fraction of requests")
            axes[i, j].grid(alpha=0.3)
        axes[0, j].legend(fontsize=7)
    return Figure(
        f"TTFT and TPOT distributions, TPOT target {fmt(tpot)} ms",
        F.to_png(fig),
        "Empirical CDFs over all requests of all seeds, one line per policy. Top: time to first "
        "token; bottom: each request's P99 inter-token gap, with the TPOT target dashed.",
    )


def _timeline_figure(runs: Sequence[RunData], tpot: float) -> Figure | None:
    chosen = {}
    for r in sorted(runs, key=lambda r: r.seed):
        if r.policy.lower().startswith("sloweave") and r.tpot_slo_ms == tpot:
            chosen.setdefault(r.workload, r)
    if not chosen:
        return None
    ws = sorted(chosen, key=workload_order)
    fig, axes = F.new_figure(2, len(ws), width=4.2, height=2.8)
    for j, w in enumerate(ws):
        it = chosen[w].iterations
        step = max(1, len(it) // MAX_TIMELINE_POINTS)
        it = it.iloc[::step]
        t = it["start_ms"].to_numpy(float) / 1000.0
        axes[0, j].plot(t, it["chunk"].to_numpy(float), ".", markersize=2, color="#1f77b4")
        axes[0, j].set_title(f"{w} (seed {chosen[w].seed})")
        axes[0, j].set_ylabel("prefill chunk (tokens)")
        if "budget_ms" in it:
            b = it["budget_ms"].to_numpy(float)
            ok = np.isfinite(b)
            axes[1, j].plot(t[ok], b[ok], ".", markersize=2, color="#ff7f0e")
        else:
            F.empty_note(axes[1, j], "no budget_ms column")
        axes[1, j].axhline(tpot, color="#57606a", linestyle="--", linewidth=1)
        axes[1, j].set_ylim(0, 1.15 * tpot)  # B_t <= D: the target is the ceiling
        axes[1, j].ticklabel_format(axis="y", useOffset=False)
        axes[1, j].set_ylabel("deadline budget B_t (ms)")
        for i in (0, 1):
            axes[i, j].set_xlabel("time (s)")
            axes[i, j].grid(alpha=0.3)
    return Figure(
        f"SLOWeave chunk size and budget over time, TPOT target {fmt(tpot)} ms",
        F.to_png(fig),
        "Each dot is one iteration (thinned to at most "
        f"{MAX_TIMELINE_POINTS} per run). Top: prefill tokens chosen; bottom: the budget to the "
        "earliest decode deadline it was chosen under (iterations without decodes have none), "
        "with the target dashed: every decode that just emitted a token has a full D left, so "
        "B_t stays at D unless a decode was delayed.",
    )


def _events_table(cs: Sequence[Cell]) -> Table:
    rows = []
    for c in cs:
        exceptions = sum(
            int(r.requests["slo_exception"].sum()) if "slo_exception" in r.requests else 0
            for r in c.runs
        )
        decision = [
            float(np.median(r.iterations["decision_us"]))
            for r in c.runs
            if "decision_us" in r.iterations and len(r.iterations)
        ]
        rows.append(
            (
                fmt(c.tpot_slo_ms),
                c.workload,
                c.policy,
                fmt(_recomputes(c)),
                fmt(exceptions),
                fmt(float(np.mean([len(r.iterations) for r in c.runs]))),
                fmt(float(np.mean(decision))) if decision else "—",
            )
        )
    return Table(
        "Preemptions and SLO exceptions",
        ("TPOT target (ms)", "workload", "policy", "recomputes (mean/seed)",
         "SLO exceptions (all seeds)", "iterations (mean/seed)", "decision (µs, median)"),
        tuple(rows),
        "SLO exceptions are deadlines a policy broke on purpose (SLOWeave's aging rule) and "
        "recorded as such; recomputes are preemptions by recompute when KV memory ran out.",
    )  # fmt: skip


def _prefix_cache_table(cs: Sequence[Cell]) -> Table | None:
    """Prefix-hit share and KV evictions of the runs with a prefix cache; None if none."""
    cached = [c for c in cs if not math.isnan(c.get("prefix_hit_share"))]
    if not cached:
        return None
    rows = tuple(
        (fmt(c.tpot_slo_ms), c.workload, c.policy, _pm(c, "prefix_hit_share", percent=True),
         fmt(c.get("kv_evictions")))
        for c in cached
    )  # fmt: skip
    return Table(
        "Prefix cache",
        ("TPOT target (ms)", "workload", "policy", "prompt tokens from cache",
         "KV blocks evicted (mean/seed)"),
        rows,
        "Prompt tokens the engine's prefix cache served (each request's first prefill) over "
        "all prompt tokens; evicted blocks are recomputed by the next request that needs "
        "them (docs/prefix_cache.md).",
    )  # fmt: skip


def scheduling_section(runs: Sequence[RunData]) -> Section:
    """The Scheduling section over every run given."""
    if not runs:
        return Section("scheduling", "Scheduling", (Text("No run folder was given."),))
    cs = cells(runs)
    blocks: list = []
    curves = attainment_figure(cs)
    if curves is not None:
        blocks.append(curves)
    several = len(setups(cs)) > 1
    for tpot in targets(cs):
        for setup in setups(cs):
            if any(c.tpot_slo_ms == tpot and c.setup == setup for c in cs):
                blocks.append(_target_table(cs, tpot, setup, several))
    ratio = _ratio_table(cs)
    if ratio is not None:
        blocks.append(ratio)
    for tpot in targets(cs):
        blocks.append(_distribution_figure(cs, tpot))
    # One timeline, at the middle target (the paper's headline 25 ms): the others look alike
    # and each costs seconds to draw.
    tpots = targets(cs)
    timeline = _timeline_figure(runs, tpots[len(tpots) // 2])
    if timeline is not None:
        blocks.append(timeline)
    blocks.append(_events_table(cs))
    cache = _prefix_cache_table(cs)
    if cache is not None:
        blocks.append(cache)
    return Section("scheduling", "Scheduling", tuple(blocks))
