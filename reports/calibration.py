"""Calibration section: how well the fitted cost table predicts what was measured.

Everything here compares the table's predictions with the calibration's own
samples, per grid point (a point's repeats are correlated, so medians and P99s
are taken per point before comparing) and per row for coverage, which is what
the conformal margin promises: ``P(actual > P99 + δ) ≤ 1%``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from servecal.costmodels.predictor import PLAN_QUANTILE
from servecal.reports import figures as F
from servecal.reports.blocks import Figure, Section, Table, Text, fmt, pct
from servecal.reports.loading import CalibrationData

AXES = ("n_decode", "chunk", "ctx", "prefix")
TARGET_COVERAGE = 0.99


def predictions(cal: CalibrationData) -> pd.DataFrame:
    """Samples with the table's P50, P99 and margin for each row (vectorised)."""
    s = cal.samples
    args = [s[a].to_numpy(dtype=float) if a in s else np.zeros(len(s)) for a in AXES]
    out = s.copy()
    out["p50"] = np.asarray(cal.predictor.predict(*args, q=0.5), dtype=float)
    out["p99"] = np.asarray(cal.predictor.predict(*args, q=0.99), dtype=float)
    out["margin"] = np.asarray(cal.predictor.margin(*args), dtype=float) * np.ones(len(s))
    out["bound"] = out["p99"] + out["margin"]
    out["covered"] = out["ms"] <= out["bound"]
    return out


def per_point(pred: pd.DataFrame) -> pd.DataFrame:
    """One row per grid point: measured median and P99 next to the predictions."""
    keys = [a for a in AXES if a in pred]
    g = pred.groupby(keys, sort=True)
    return pd.DataFrame(
        {
            "measured_p50": g["ms"].median(),
            "measured_p99": g["ms"].quantile(0.99),
            "p50": g["p50"].first(),
            "bound": g["bound"].first(),
            "repeats": g["ms"].size(),
        }
    ).reset_index()


def _buckets(values: pd.Series, max_buckets: int = 8) -> pd.Series:
    """Bucket labels: the distinct values when few, else quantile ranges."""
    distinct = np.unique(values)
    if distinct.size <= max_buckets:
        return values.astype(int).astype(str)
    edges = np.unique(np.quantile(values, np.linspace(0, 1, max_buckets + 1)).astype(int))
    idx = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, len(edges) - 2)
    labels = np.array([f"{edges[i]}–{edges[i + 1]}" for i in range(len(edges) - 1)])
    return pd.Series(labels[idx], index=values.index)


def coverage_by(pred: pd.DataFrame, axis: str) -> pd.DataFrame:
    """Row coverage of P99+δ per bucket of ``axis``, in the axis' natural order."""
    labels = _buckets(pred[axis])
    order = pred.groupby(labels)[axis].min().sort_values().index
    g = pred.groupby(labels)
    table = pd.DataFrame({"coverage": g["covered"].mean(), "rows": g["covered"].size()})
    return table.loc[order]


def out_of_domain(cal: CalibrationData) -> dict[str, int]:
    """Rows outside the table's validity domain, per axis (empty when none is recorded)."""
    domain = getattr(cal.predictor, "domain", None) or cal.table_json.get("domain") or {}
    counts: dict[str, int] = {}
    for axis in AXES:
        bounds = domain.get(axis) if isinstance(domain, dict) else None
        if axis not in cal.samples or bounds is None:
            continue
        lo, hi = _bounds(bounds)
        v = cal.samples[axis].to_numpy(dtype=float)
        counts[axis] = int(np.sum((v < lo) | (v > hi)))
    return counts


def _bounds(bounds: Any) -> tuple[float, float]:
    if isinstance(bounds, dict):
        return float(bounds.get("min", -np.inf)), float(bounds.get("max", np.inf))
    lo, hi = bounds
    return float(lo), float(hi)


def _scatter(points: pd.DataFrame) -> Figure:
    fig, axes = F.new_figure(1, 1, width=6.2, height=4.6)
    ax = axes[0, 0]
    ax.scatter(points["measured_p50"], points["p50"], s=12, alpha=0.7, label="P50 (per point)")
    ax.scatter(
        points["measured_p99"], points["bound"], s=12, alpha=0.7, marker="^", color="#d62728",
        label="P99 + δ vs measured P99",
    )  # fmt: skip
    lo = float(np.nanmin(points[["measured_p50", "p50"]].to_numpy()))
    hi = float(np.nanmax(points[["measured_p99", "bound"]].to_numpy()))
    ax.plot([lo, hi], [lo, hi], color="#57606a", linewidth=1, linestyle="--", label="y = x")
    F.log_axis(ax, "x")
    F.log_axis(ax, "y")
    ax.set_xlabel("measured iteration time (ms)")
    ax.set_ylabel("predicted iteration time (ms)")
    ax.legend(fontsize=8)
    return Figure(
        "Predicted vs measured",
        F.to_png(fig),
        "One marker per grid point. Blue: predicted P50 against the measured median; red: "
        "the planning bound P99 + δ against the measured P99 (should sit on or above y = x).",
    )


def _coverage_figure(by_n: pd.DataFrame, by_c: pd.DataFrame) -> Figure:
    fig, axes = F.new_figure(1, 2, width=5.2, height=3.6)
    for ax, table, axis in ((axes[0, 0], by_n, "n_decode"), (axes[0, 1], by_c, "chunk")):
        ax.bar(range(len(table)), 100 * table["coverage"], color="#1f77b4")
        ax.axhline(100 * TARGET_COVERAGE, color="#d62728", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(table)), table.index, rotation=35, fontsize=8)
        ax.set_ylim(max(0.0, 100 * float(table["coverage"].min()) - 5), 100.5)
        ax.set_xlabel(f"{axis} bucket ({'requests' if axis == 'n_decode' else 'tokens'})")
        ax.set_ylabel("rows with actual ≤ P99 + δ (%)")
    return Figure(
        "P99 + δ coverage by bucket",
        F.to_png(fig),
        "Share of timed iterations at or under the planning bound, by decode batch and "
        "chunk size; the dashed line is the 99% the margin promises.",
    )


def _residual_figure(pred: pd.DataFrame) -> Figure:
    fig, axes = F.new_figure(1, 1, width=6.2, height=3.6)
    ax = axes[0, 0]
    rel = 100 * (pred["ms"] / pred["p50"] - 1)
    rel = rel[np.isfinite(rel)]
    hi = float(np.quantile(rel, 0.999)) if len(rel) else 1.0
    ax.hist(np.clip(rel, None, hi), bins=60, color="#1f77b4")
    ax.axvline(0, color="#57606a", linewidth=1)
    ax.set_xlabel("residual: actual / predicted P50 − 1 (%)")
    ax.set_ylabel("iterations")
    return Figure(
        "Residual distribution",
        F.to_png(fig),
        "Relative error of every timed iteration against the P50 prediction "
        "(the top 0.1% is folded into the last bin). Its right tail is what the P99 and δ cover.",
    )


def _heatmap(cal: CalibrationData, pred: pd.DataFrame) -> Figure:
    ctx = int(pred["ctx"].mode().iloc[0]) if "ctx" in pred else 0
    ns = np.unique(pred["n_decode"].to_numpy(dtype=int))
    cs = np.unique(pred["chunk"].to_numpy(dtype=int))
    grid = getattr(cal.predictor, "axes", None)
    if isinstance(grid, dict) and {"n_decode", "chunk", "ctx"} <= set(grid):
        # The table's own grid: what a server actually looks up.
        ns, cs = np.asarray(grid["n_decode"]), np.asarray(grid["chunk"])
        ctxs = np.asarray(grid["ctx"])
        ctx = int(ctxs[np.argmin(np.abs(ctxs - ctx))])
    nn, cc = np.meshgrid(ns, cs, indexing="ij")
    z = np.asarray(
        cal.predictor.predict(nn.ravel(), cc.ravel(), np.full(nn.size, ctx), 0, q=0.99), dtype=float
    ) + np.asarray(cal.predictor.margin(nn.ravel(), cc.ravel(), np.full(nn.size, ctx), 0))
    z = z.reshape(nn.shape)
    fig, axes = F.new_figure(1, 1, width=7.0, height=4.4)
    ax = axes[0, 0]
    im = ax.imshow(z, aspect="auto", origin="lower", cmap="viridis")
    ax.set_xticks(range(len(cs)), cs, rotation=45, fontsize=7)
    ax.set_yticks(range(len(ns)), ns, fontsize=7)
    ax.set_xlabel("prefill chunk (tokens)")
    ax.set_ylabel("decode batch n_decode (requests)")
    fig.colorbar(im, ax=ax, label="P99 + δ (ms)")
    if z.size <= 150:
        for (i, j), v in np.ndenumerate(z):
            ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=6, color="w")
    return Figure(
        "Cost table as a heat map",
        F.to_png(fig),
        f"Planning bound P99 + δ on the measured (n_decode, chunk) grid at ctx = {ctx} "
        "tokens, prefix = 0. It is monotone along both axes by construction.",
    )


def _summary_rows(cal: CalibrationData, pred: pd.DataFrame, points: pd.DataFrame) -> list:
    mape = float(np.mean(np.abs(points["p50"] / points["measured_p50"] - 1)))
    rows = [
        ("samples (timed iterations)", fmt(len(pred))),
        ("grid points", fmt(len(points))),
        ("P50 MAPE per point (all samples)", pct(mape)),
        ("rows with actual ≤ P99 + δ (all samples)", pct(float(pred["covered"].mean()))),
        ("mean margin δ (ms)", fmt(float(pred["margin"].mean()))),
        (
            "mean tightness (P99 + δ) / actual − 1",
            pct(float((pred["bound"] / pred["ms"]).mean() - 1)),
        ),
    ]
    margin = getattr(cal.predictor, "margin_info", None)
    if margin is not None:
        rows.append(("margin: δ = ρ · P99, ρ", fmt(margin.rho)))
        rows.append(("margin: target coverage", pct(margin.target)))
        if margin.validated_coverage is not None:
            rows.append(("margin: held-out coverage at fit", pct(margin.validated_coverage)))
    recorded = dict(getattr(cal.predictor, "validation", None) or {})
    recorded.update(cal.evaluation or {})
    for key, value in recorded.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            as_pct = any(w in key for w in ("coverage", "mape", "tightness"))
            rows.append((f"held-out {key} (recorded at fit)", pct(value) if as_pct else fmt(value)))
    return rows


def _fingerprint_table(fingerprint: dict[str, Any]) -> Table:
    rows = tuple(
        (str(k), str(v) if not isinstance(v, dict) else ", ".join(f"{a}={b}" for a, b in v.items()))
        for k, v in sorted(fingerprint.items())
    )
    return Table(
        "Fingerprint", ("field", "value"), rows or (("(none recorded)", "—"),), numeric=False
    )


def calibration_section(cals: Sequence[CalibrationData]) -> Section:
    """The Calibration section for every calibration folder given."""
    blocks: list = []
    if not cals:
        blocks.append(Text("No calibration folder was given, so there is nothing to show here."))
        return Section("calibration", "Calibration", tuple(blocks))
    for cal in cals:
        if len(cals) > 1:
            blocks.append(Text(f"Calibration folder: {cal.path}"))
        blocks.append(_fingerprint_table(cal.fingerprint))
        if cal.predictor is None:
            blocks.append(Text("No costtable.json beside the samples: predictions not shown."))
            continue
        if getattr(cal.predictor, "tail", PLAN_QUANTILE) is None:
            blocks.append(
                Text("The table was fitted from medians only (no repeats): it has no P99 or δ.")
            )
            continue
        pred = predictions(cal)
        points = per_point(pred)
        blocks.append(
            Table("Accuracy", ("metric", "value"), tuple(_summary_rows(cal, pred, points)))
        )
        ood = out_of_domain(cal)
        ood_rows = tuple((axis, fmt(n)) for axis, n in ood.items()) or (
            ("(no validity domain recorded in the table)", "—"),
        )
        blocks.append(
            Table(
                "Out-of-domain rows",
                ("axis", "rows outside the table's domain"),
                ood_rows,
                "Queries outside the domain are clamped conservatively by the table.",
            )
        )
        blocks.append(_scatter(points))
        by_n, by_c = coverage_by(pred, "n_decode"), coverage_by(pred, "chunk")
        blocks.append(_coverage_figure(by_n, by_c))
        for axis, table in (("n_decode", by_n), ("chunk", by_c)):
            blocks.append(
                Table(
                    f"Coverage by {axis}",
                    (f"{axis} bucket", "rows", "actual ≤ P99 + δ"),
                    tuple((str(i), fmt(int(r.rows)), pct(r.coverage)) for i, r in table.iterrows()),
                )
            )
        blocks.append(_residual_figure(pred))
        blocks.append(_heatmap(cal, pred))
    return Section("calibration", "Calibration", tuple(blocks))
