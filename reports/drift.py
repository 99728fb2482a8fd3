"""Drift section: online validation of every run, and the drift monitor's timeline.

Every run logs predicted P50/P99 and margin next to the actual iteration time, so
online coverage is always shown; the monitor's state (``ok → warn → drift``) is
plotted for runs that carry it (a ``drift_state`` column).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from servecal.reports import figures as F
from servecal.reports.aggregate import policy_order, workload_order
from servecal.reports.blocks import Figure, Section, Table, Text, fmt, pct
from servecal.reports.loading import RunData

STATES = ("ok", "warn", "drift")
MAX_DRIFT_FIGURES = 4


def online_validation(run: RunData) -> tuple[float, float]:
    """(P50 MAPE, P99 + δ coverage) of the run's predictions vs actual iteration times.

    Prefers the engine's own figures in the run summary (``online``).
    """
    online = run.summary.get("online")
    if isinstance(online, dict) and "p99_coverage" in online:
        # None: no step had a prediction (a live log's tail rows get theirs at the flush)
        mape, cover = online.get("p50_mape"), online["p99_coverage"]
        return (np.nan if mape is None else float(mape)), (
            np.nan if cover is None else float(cover)
        )
    it = run.iterations
    if not {"pred_p50_ms", "pred_p99_ms"} <= set(it.columns) or it.empty:
        return np.nan, np.nan
    # a live log's tail rows have no predictions yet (they are made at the flush)
    it = it[np.isfinite(it["pred_p50_ms"].to_numpy(float))]
    if it.empty:
        return np.nan, np.nan
    actual = it["duration_ms"].to_numpy(float)
    margin = it["margin_ms"].to_numpy(float) if "margin_ms" in it else 0.0
    mape = float(np.mean(np.abs(it["pred_p50_ms"].to_numpy(float) / actual - 1)))
    cover = float(np.mean(actual <= it["pred_p99_ms"].to_numpy(float) + margin))
    return mape, cover


def state_changes(iterations: pd.DataFrame) -> list[tuple[int, float, str]]:
    """(iteration, time ms, new state) at each change of ``drift_state``."""
    states = iterations["drift_state"].astype(str).to_numpy()
    if states.size == 0:
        return []
    idx = np.flatnonzero(np.r_[True, states[1:] != states[:-1]])
    starts = iterations["start_ms"].to_numpy(float)
    return [(int(i), float(starts[i]), str(states[i])) for i in idx]


def _validation_table(runs: Sequence[RunData]) -> Table:
    rows = []
    for r in sorted(
        runs,
        key=lambda r: (r.tpot_slo_ms, workload_order(r.workload), policy_order(r.policy), r.seed),
    ):
        mape, cover = online_validation(r)
        rows.append(
            (fmt(r.tpot_slo_ms), r.workload, r.policy, str(r.seed), fmt(len(r.iterations)),
             pct(mape), pct(cover), _final_state(r))
        )  # fmt: skip
    return Table(
        "Online validation per run",
        ("TPOT target (ms)", "workload", "policy", "seed", "iterations", "P50 MAPE",
         "actual ≤ P99 + δ", "final monitor state"),
        tuple(rows),
        "Every iteration's actual time against the prediction the scheduler planned with.",
    )  # fmt: skip


def _final_state(run: RunData) -> str:
    if "drift_state" in run.iterations and len(run.iterations):
        return str(run.iterations["drift_state"].iloc[-1])
    if run.drift and "state" in run.drift:
        return str(run.drift["state"])
    return "—"


def _drift_figure(run: RunData) -> Figure:
    it = run.iterations
    t = it["start_ms"].to_numpy(float) / 1000.0
    fig, axes = F.new_figure(2, 1, width=9.0, height=2.4)
    codes = it["drift_state"].astype(str).map({s: i for i, s in enumerate(STATES)})
    axes[0, 0].step(t, codes.fillna(-1).to_numpy(float), where="post", color="#d62728")
    axes[0, 0].set_yticks(range(len(STATES)), STATES)
    axes[0, 0].set_ylabel("monitor state")
    if "pred_p50_ms" in it:
        ratio = np.log(it["duration_ms"].to_numpy(float) / it["pred_p50_ms"].to_numpy(float))
        smooth = pd.Series(ratio).rolling(max(1, len(ratio) // 200), min_periods=1).median()
        axes[1, 0].plot(t, 100 * (np.exp(smooth) - 1), color="#1f77b4", linewidth=1)
        axes[1, 0].axhline(0, color="#57606a", linewidth=1)
    else:
        F.empty_note(axes[1, 0], "no predictions logged")
    axes[1, 0].set_ylabel("actual / P50 − 1 (%, rolling median)")
    for ax in axes[:, 0]:
        ax.set_xlabel("time (s)")
        ax.grid(alpha=0.3)
    return Figure(
        f"Drift monitor: {run.policy}, {run.workload}, TPOT {fmt(run.tpot_slo_ms)} ms, "
        f"seed {run.seed}",
        F.to_png(fig),
        "Top: monitor state over time; bottom: how much slower (positive) or faster the "
        "iterations ran than the table's P50.",
    )


def summary_items(drift: dict) -> list[tuple[str, str]]:
    """The monitor summary's top-level facts (nested details stay in run.json)."""
    items = []
    for k, v in drift.items():
        if isinstance(v, bool) or v is None or isinstance(v, str):
            items.append((k, str(v) if v is not None else "—"))
        elif isinstance(v, (int, float)):
            items.append((k, pct(v) if "coverage" in k else fmt(v)))
        elif isinstance(v, list):
            items.append((f"{k} (count)", fmt(len(v))))
    return items


def drift_section(runs: Sequence[RunData]) -> Section:
    """The Drift section: validation table, then each monitored run's timeline."""
    if not runs:
        return Section("drift", "Drift", (Text("No run folder was given."),))
    blocks: list = [_validation_table(runs)]
    monitored = [r for r in runs if "drift_state" in r.iterations]
    if not monitored:
        blocks.append(Text("No run here carries drift-monitor output (no drift_state column)."))
        return Section("drift", "Drift", tuple(blocks))
    changes = [
        (r.policy, r.workload, fmt(r.tpot_slo_ms), str(r.seed), fmt(i), fmt(ms / 1000.0), s)
        for r in monitored
        for i, ms, s in state_changes(r.iterations)
    ]
    blocks.append(
        Table(
            "Monitor state changes",
            ("policy", "workload", "TPOT target (ms)", "seed", "iteration", "time (s)", "state"),
            tuple(changes),
        )
    )
    # Drifted runs first: they are the ones a reader needs to see.
    monitored.sort(key=lambda r: (_final_state(r) == "ok", r.workload, r.policy, r.seed))
    for r in monitored[:MAX_DRIFT_FIGURES]:
        blocks.append(_drift_figure(r))
        if r.drift:
            items = tuple(summary_items(r.drift)) or (("(empty)", "—"),)
            title = f"Monitor summary: {r.policy}, {r.workload}, seed {r.seed}"
            blocks.append(Table(title, ("field", "value"), items, numeric=False))
    return Section("drift", "Drift", tuple(blocks))
