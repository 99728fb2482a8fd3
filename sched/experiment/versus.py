"""A simulated run against a measured one: TTFT and TPOT quantiles and SLO attainment.

Both are servecal run folders (``requests.parquet``): the measured one from
``servecal bench`` on a real server, the simulated one from ``servecal simulate
--workload trace:RUN_FOLDER`` (the same arrivals and lengths). Quantiles are over
requests: TTFT is first token minus arrival, TPOT a request's mean gap between
tokens (``tpot_mean_ms``); attainment is the share of requests that met both SLOs
(:func:`servecal.sched.metrics.outcome_columns`, the rule every run summary uses).
A run with a prefix cache (a ``cached_tokens`` column: the simulator's, or the vLLM
plug-in's as ``servecal bench`` joins it) also has its prefix-hit share: prompt tokens
served from cache over prompt tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from servecal.util.errors import InputError

QUANTILES = (50, 95, 99)


def run_quantiles(folder: Path) -> dict[str, Any]:
    """``{"ttft_ms": {50: ..., 95: ..., 99: ...}, "tpot_ms": {...}, "attainment": x,
    "requests": n}`` of the run in ``folder`` (NaN where no request has a value)."""
    from servecal.costmodels.segments import read_table
    from servecal.sched.metrics import outcome_columns

    path = Path(folder) / "requests.parquet"
    if not path.exists():
        raise InputError(f"{folder}: no requests.parquet (not a run folder)")
    requests = read_table(path)
    out = outcome_columns(requests)
    tpot = requests["tpot_mean_ms"].to_numpy(dtype=float)

    def quantiles(values: np.ndarray) -> dict[int, float]:
        values = values[np.isfinite(values)]
        return {q: float(np.percentile(values, q)) if values.size else float("nan")
                for q in QUANTILES}  # fmt: skip

    n = len(requests)
    prompt = float(requests["prompt_tokens"].sum())
    hits = (
        float(np.nansum(requests["cached_tokens"].to_numpy(dtype=float))) / prompt
        if "cached_tokens" in requests and prompt > 0
        else float("nan")
    )
    return {
        "requests": n,
        "ttft_ms": quantiles(out["ttft_ms"]),
        "tpot_ms": quantiles(tpot),
        "attainment": float(out["good"].sum() / n) if n else float("nan"),
        "prefix_hit_share": hits,
    }


def compare(measured: dict[str, Any], simulated: dict[str, Any]) -> dict[str, Any]:
    """Relative errors (simulated / measured − 1) of each quantile, and the attainment
    difference in points (simulated − measured)."""
    errors: dict[str, Any] = {}
    for metric in ("ttft_ms", "tpot_ms"):
        errors[metric] = {
            q: simulated[metric][q] / measured[metric][q] - 1.0
            if measured[metric][q] > 0
            else float("nan")
            for q in QUANTILES
        }
    errors["attainment_points"] = simulated["attainment"] - measured["attainment"]
    errors["prefix_hit_points"] = simulated.get("prefix_hit_share", float("nan")) - measured.get(
        "prefix_hit_share", float("nan")
    )
    return errors


def table(measured: dict[str, Any], simulated: dict[str, Any]) -> str:
    """A Markdown table of both runs and the errors."""
    err = compare(measured, simulated)
    lines = ["| metric | measured | simulated | error |", "|---|---:|---:|---:|"]
    for metric, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
        for q in QUANTILES:
            lines.append(
                f"| {name} P{q} (ms) | {measured[metric][q]:.1f} | {simulated[metric][q]:.1f} "
                f"| {100 * err[metric][q]:+.0f}% |"
            )
    lines.append(
        f"| SLO attainment | {100 * measured['attainment']:.1f}% | "
        f"{100 * simulated['attainment']:.1f}% | {100 * err['attainment_points']:+.1f} pts |"
    )
    if np.isfinite(err["prefix_hit_points"]):
        lines.append(
            f"| prefix-cache hits (prompt tokens) | {100 * measured['prefix_hit_share']:.1f}% | "
            f"{100 * simulated['prefix_hit_share']:.1f}% | "
            f"{100 * err['prefix_hit_points']:+.1f} pts |"
        )
    return "\n".join(lines)
