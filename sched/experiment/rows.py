"""Rows of a comparison, ratios to the best baseline, and the summary files.

One row format for every comparison (engine policies, the FlowPrefill study, user
policies): what ``servecal compare --json`` prints and ``compare.json`` keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servecal.sched.experiment.goodput import ABOVE_CAP
from servecal.sched.experiment.sweep import SpecOutcome
from servecal.sched.policies.registry import is_baseline

#: Keys of every row (``<metric>_std`` follow the metrics that have one).
ROW_KEYS = (
    "workload",
    "policy",
    "backend",
    "setting",
    "tpot_slo",
    "rate",
    "goodput",
    "attainment",
    "tpot_attainment",
    "p99_ttft_ms",
    "p99_tpot_ms",
    "recomputes",
    "parks",
)
#: Metrics whose spread over seeds a row carries.
SPREAD_KEYS = ("goodput", "attainment", "p99_ttft_ms", "p99_tpot_ms")
#: Counters a row carries when the backend reports them (the operator driver; the
#: engine's prefix cache; speculative decoding).
COUNTER_KEYS = ("wakeups", "parked_batches", "p99_blocking_ms", "max_operator_ms",
                "prefix_hit_share", "kv_evictions", "tokens_per_decode")  # fmt: skip
#: Max-goodput keys a row carries when a search ran.
GOODPUT_KEYS = (
    "max_goodput",
    "max_goodput_std",
    "max_goodput_per_seed",
    "max_goodput_bound",
    "max_goodput_probes",
)


def row(outcome: SpecOutcome) -> dict[str, Any]:
    """The means over seeds of one spec, as a row."""
    spec, mean = outcome.spec, outcome.mean
    out: dict[str, Any] = {
        "workload": spec.workload,
        "policy": spec.policy.label,
        "backend": spec.backend,
        "setting": spec.setting,
        "tpot_slo": spec.tpot_slo_ms,
        "rate": spec.rate,
        "truth": spec.truth,
        "predictor": spec.predictor,
    }
    for key in ROW_KEYS[6:]:
        out[key] = mean.get(key)
        if key in SPREAD_KEYS:
            out[f"{key}_std"] = mean.get(f"{key}_std")
    out.update({k: mean[k] for k in COUNTER_KEYS if k in mean})
    out.update({k: mean[k] for k in GOODPUT_KEYS if k in mean})
    return out


def ratios(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (setting, TPOT target, workload): each policy that is not a static baseline,
    its max goodput (when searched, else goodput) over the best baseline's.

    The best baseline is the one with the highest value in that cell (named in
    ``best_baseline``). A value that is a bound, not a measurement (a search still
    meeting its target at the cap), makes the ratio one too: ``ratio_bound`` is
    ``at_least`` (the policy is above the cap), ``at_most`` (the baseline is) or
    ``unknown`` (both; ``ratio`` is then ``None``); ``None`` when both were measured.
    ``ratio_per_seed``: the same ratio seed by seed (common random numbers: every
    policy of a seed saw the same requests), when searched.
    """
    metric = "max_goodput" if any("max_goodput" in r for r in rows) else "goodput"
    cells: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["setting"], r["tpot_slo"], r["workload"]), []).append(r)
    out = []
    for (setting, tpot, workload), cell in cells.items():
        baselines = [r for r in cell if is_baseline(r["policy"].split("[")[0])]
        if not baselines:
            continue
        best = max(baselines, key=lambda r: r.get(metric) or 0.0)
        for r in cell:
            if r not in baselines:
                out.append({"setting": setting, "tpot_slo": tpot, "workload": workload,
                            **_ratio(r, best, metric)})  # fmt: skip
    return out


def _ratio(policy: dict[str, Any], best: dict[str, Any], metric: str) -> dict[str, Any]:
    """A policy's value over its cell's best baseline, and whether either is a bound:
    one row of :func:`ratios` after the cell's own keys."""
    base = best.get(metric) or 0.0
    value = policy.get(metric)
    bound = _ratio_bound(policy, best) if metric == "max_goodput" else None
    ratio = (value / base) if base > 0 and value is not None else None
    return {
        "policy": policy["policy"],
        "metric": metric,
        "value": value,
        "best_baseline": best["policy"],
        "best_baseline_value": base,
        "ratio": None if bound == "unknown" else ratio,
        "ratio_bound": bound,
        "ratio_per_seed": _per_seed(policy, best) if metric == "max_goodput" else None,
    }


def _ratio_bound(policy: dict[str, Any], best: dict[str, Any]) -> str | None:
    above = (
        policy.get("max_goodput_bound") == ABOVE_CAP,
        best.get("max_goodput_bound") == ABOVE_CAP,
    )
    return {(True, True): "unknown", (True, False): "at_least", (False, True): "at_most"}.get(above)


def _per_seed(policy: dict[str, Any], best: dict[str, Any]) -> list[float | None] | None:
    mine, theirs = policy.get("max_goodput_per_seed"), best.get("max_goodput_per_seed")
    if not mine or not theirs or len(mine) != len(theirs):
        return None
    return [a / b if b else None for a, b in zip(mine, theirs, strict=True)]


def ratio_text(r: dict[str, Any]) -> str:
    """A ratio row's ratio as text: ``1.05x``, ``>= 1.05x``, ``<= 0.9x`` or ``-``."""
    if r.get("ratio") is None:
        return "-"
    prefix = {"at_least": ">= ", "at_most": "<= "}.get(r.get("ratio_bound") or "", "")
    return f"{prefix}{r['ratio']:.3f}x"


def write_summary(path: str | Path, specs: Sequence[Any], doc: dict[str, Any]) -> None:
    """Write a sweep's summary JSON atomically (``specs`` described first)."""
    from servecal.sched.runfolder import write_json

    write_json(path, {"specs": [s.describe() for s in specs], **doc})
