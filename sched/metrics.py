"""SLO metrics: the one implementation every command and report uses.

Definitions (docs/engine.md, §Metrics of docs/design.md):

* TTFT = first token − arrival. A request that never produced a token is counted
  with a *censored* TTFT, end of run − arrival (a lower bound), so a policy cannot
  improve its TTFT figures by starving requests. Requests the engine *rejected*
  (optional ``rejected`` column) are left out of TTFT statistics, count as not
  good, and are reported as ``rejected``.
* A request's TPOT figure is the P99 of its own inter-token gaps (``tpot_p99_ms`` in
  the requests frame); a one-token request has no gap and meets TPOT trivially.
* *Good* = finished, TTFT ≤ its TTFT SLO and TPOT figure ≤ its TPOT SLO (the SLOs
  checked are ``slos``; with TTFT alone, as for a prefill instance, the first token
  is what counts and completion is not required).
* Goodput = good requests / (last completion − first arrival), in req/s.
* Max goodput = the highest rate with attainment ≥ 90% (DistServe), searched by
  :mod:`servecal.sched.experiment.goodput`.
* Energy per good request = run energy / good requests: servecal's own metric
  (ML.ENERGY defines energy per token, also reported).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from servecal.costmodels.errors import InputError
from servecal.sched.result import REQUEST_COLUMNS as RESULT_COLUMNS

SLO_NAMES = ("ttft", "tpot")

#: Columns of the requests frame that the metrics need (a run's frame has more:
#: :data:`servecal.sched.result.REQUEST_COLUMNS`).
REQUEST_COLUMNS = tuple(
    c for c in RESULT_COLUMNS if c not in ("slo_class", "tpot_mean_ms", "tpot_max_ms",
                                            "slo_exception", "rejected")
)  # fmt: skip

#: Summary keys whose spread over seeds is reported as ``<key>_std``.
MAIN_METRICS = (
    "goodput",
    "attainment",
    "p99_ttft_ms",
    "mean_ttft_ms",
    "p99_tpot_ms",
    "max_goodput",
    "energy_per_good_request_j",
)


def _check_slos(slos: Sequence[str]) -> tuple[str, ...]:
    slos = tuple(slos)
    if not slos or any(s not in SLO_NAMES for s in slos):
        raise ValueError(f"slos must be a non-empty subset of {SLO_NAMES}, got {slos}")
    return slos


def _require(frame: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(f"{what} frame lacks column(s) {', '.join(missing)}")


def _run_end_ms(frame: pd.DataFrame) -> float:
    """Last event of the run: the latest completion, first token or arrival."""
    times = pd.concat([frame["completion_ms"], frame["first_token_ms"], frame["arrival_ms"]])
    return float(times.max()) if times.notna().any() else math.nan


def request_outcomes(requests: pd.DataFrame, slos: Sequence[str] = SLO_NAMES) -> pd.DataFrame:
    """A copy of the requests frame with ``ttft_ms, ttft_met, tpot_met, finished, good``.

    ``ttft_ms`` is NaN for a request with no first token; ``ttft_met`` is then False.
    ``tpot_met`` is False for an unfinished request that has no gap yet.
    """
    slos = _check_slos(slos)
    _require(requests, REQUEST_COLUMNS, "requests")
    out = requests.copy()
    finished = out["completion_ms"].notna()
    out["finished"] = finished
    out["ttft_ms"] = out["first_token_ms"] - out["arrival_ms"]
    out["ttft_met"] = (out["ttft_ms"] <= out["ttft_slo_ms"]).fillna(False).astype(bool)
    has_gap = out["tpot_p99_ms"].notna()
    one_token_done = finished & (out["output_tokens"] <= 1)
    gap_ok = (out["tpot_p99_ms"] <= out["tpot_slo_ms"]) & has_gap
    out["tpot_met"] = (gap_ok | (~has_gap & one_token_done)).astype(bool)
    good = pd.Series(True, index=out.index)
    if "ttft" in slos:
        good &= out["ttft_met"]
    if "tpot" in slos:
        good &= out["tpot_met"] & finished
    out["good"] = good.astype(bool)
    return out


def _window_s(out: pd.DataFrame, slos: Sequence[str]) -> float:
    """First arrival → last completion (last first token when TPOT is not judged), in s."""
    if out.empty:
        return 0.0
    closes = out["completion_ms"] if "tpot" in slos else out["first_token_ms"]
    if not closes.notna().any():
        return 0.0
    return (float(closes.max()) - float(out["arrival_ms"].min())) / 1000.0


def _rejected(out: pd.DataFrame) -> pd.Series:
    """Requests the engine refused (admission control, too large for KV); optional column."""
    if "rejected" not in out.columns:
        return pd.Series(False, index=out.index)
    return out["rejected"].fillna(False).astype(bool)


def _censored_ttft(out: pd.DataFrame) -> pd.Series:
    """TTFT with never-served requests counted as end of run − arrival (a lower bound).

    Rejected requests are left out (NaN): they were refused, not kept waiting; they
    count as not good and are reported by number.
    """
    censored = out["ttft_ms"].fillna(_run_end_ms(out) - out["arrival_ms"])
    return censored.mask(_rejected(out))


def _p99(values: pd.Series) -> float | None:
    v = values.dropna().to_numpy(dtype=float)
    return float(np.percentile(v, 99)) if v.size else None


def _energy(iterations: pd.DataFrame | None) -> float | None:
    """Run energy in J, or None when any iteration lacks a reading (a partial sum lies)."""
    if iterations is None or "energy_j" not in iterations.columns or iterations.empty:
        return None
    e = iterations["energy_j"]
    return None if e.isna().any() else float(e.sum())


def _online(iterations: pd.DataFrame | None) -> dict[str, float | None]:
    """P50 MAPE (fraction of actual) and coverage of actual ≤ P99 + margin."""
    result: dict[str, float | None] = {"p50_mape": None, "p99_coverage": None}
    if iterations is None or iterations.empty:
        return result
    actual = iterations["duration_ms"]
    if "pred_p50_ms" in iterations.columns:
        ok = iterations["pred_p50_ms"].notna() & (actual > 0)
        if ok.any():
            err = (actual[ok] - iterations["pred_p50_ms"][ok]).abs() / actual[ok]
            result["p50_mape"] = float(err.mean())
    if "pred_p99_ms" in iterations.columns:
        ok = iterations["pred_p99_ms"].notna()
        if ok.any():
            margin = iterations.get("margin_ms", pd.Series(0.0, index=iterations.index))
            bound = iterations["pred_p99_ms"][ok] + margin[ok].fillna(0.0)
            result["p99_coverage"] = float((actual[ok] <= bound).mean())
    return result


def summarize(
    requests: pd.DataFrame,
    iterations: pd.DataFrame | None = None,
    slos: Sequence[str] = SLO_NAMES,
) -> dict[str, Any]:
    """The headline numbers of one run (keys in the module docstring and docs/workloads.md).

    Undefined values are None (no energy meter, no good request to divide by, no
    iterations frame), never NaN, so the dict serialises as plain JSON. A run with
    several SLO classes also gets ``by_class`` (see :func:`summarize_by_class`), one with
    several TPOT SLOs ``by_tpot_slo`` (see :func:`summarize_by_tpot_slo`).
    """
    out = request_outcomes(requests, slos)
    n = len(out)
    n_good = int(out["good"].sum())
    n_finished = int(out["finished"].sum())
    window_s = _window_s(out, slos)
    goodput = n_good / window_s if n_good and window_s > 0 else 0.0
    censored_ttft = _censored_ttft(out)

    energy = _energy(iterations)
    tokens = float(out["tokens_out"].sum())
    have_iters = iterations is not None
    if have_iters:
        _require(iterations, ("duration_ms", "decision_us"), "iterations")
    decision = iterations["decision_us"].dropna() if have_iters else pd.Series(dtype=float)
    summary = {
        "requests": n,
        "finished": n_finished,
        "good": n_good,
        "goodput": goodput,
        "attainment": n_good / n if n else 0.0,
        "p99_ttft_ms": _p99(censored_ttft),
        "mean_ttft_ms": float(censored_ttft.mean()) if censored_ttft.notna().any() else None,
        "p99_tpot_ms": _p99(out["tpot_p99_ms"]),
        "energy_j": energy,
        "energy_per_good_request_j": energy / n_good if energy is not None and n_good else None,
        "energy_per_output_token_j": energy / tokens if energy is not None and tokens else None,
        "iterations": len(iterations) if have_iters else None,
        "recomputes": int(out["recomputes"].sum()),
        "parks": int(out["parks"].sum()),
        "rejected": int(_rejected(out).sum()),
        "decision_us_median": float(decision.median()) if len(decision) else None,
        "online": _online(iterations),
    }
    if "slo_class" in out.columns and out["slo_class"].nunique() > 1:
        summary["by_class"] = summarize_by_class(requests, slos)
    if out["tpot_slo_ms"].nunique() > 1:
        summary["by_tpot_slo"] = summarize_by_tpot_slo(requests, slos)
    return summary


def _mean_std(values: list[float]) -> tuple[float, float]:
    a = np.asarray(values, dtype=float)
    std = float(a.std(ddof=1)) if a.size > 1 else 0.0
    return float(a.mean()), std


def mean_over_seeds(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Average summaries of the same configuration over seeds.

    Numbers are averaged over the seeds where they are not None (None when none
    has one); nested dicts (``online``) are averaged key by key; the keys of
    ``MAIN_METRICS`` also get ``<key>_std`` (sample standard deviation, 0 for one
    seed). Other values are kept when every seed agrees. ``seeds`` counts the inputs.
    """
    if not summaries:
        raise ValueError("mean_over_seeds needs at least one summary")
    keys: list[str] = []
    for s in summaries:
        keys += [k for k in s if k not in keys]
    result: dict[str, Any] = {}
    for key in keys:
        values = [s.get(key) for s in summaries]
        present = [v for v in values if v is not None]
        if present and all(isinstance(v, dict) for v in present):
            result[key] = mean_over_seeds(present)
            result[key].pop("seeds", None)
        elif present and all(_is_number(v) for v in present):
            mean, std = _mean_std(present)
            result[key] = mean
            if key in MAIN_METRICS:
                result[f"{key}_std"] = std
        elif not present:
            result[key] = None
            if key in MAIN_METRICS:
                result[f"{key}_std"] = None
        elif all(v == present[0] for v in values):
            result[key] = present[0]
    result["seeds"] = len(summaries)
    return result


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def summarize_by_class(
    requests: pd.DataFrame, slos: Sequence[str] = SLO_NAMES
) -> dict[str, dict[str, Any]]:
    """Per ``slo_class``: requests, good, attainment, goodput, P99 TTFT and P99 TPOT.

    Every class's goodput uses the whole run's window, so the classes' goodputs add
    up to the run's goodput; TTFTs are censored at the end of the whole run.
    """
    slos = _check_slos(slos)
    _require(requests, ("slo_class",), "requests")
    out = request_outcomes(requests, slos)
    window_s = _window_s(out, slos)
    out["ttft_censored_ms"] = _censored_ttft(out)
    result: dict[str, dict[str, Any]] = {}
    for name, rows in out.groupby("slo_class", sort=True):
        n_good = int(rows["good"].sum())
        result[str(name)] = {
            "requests": len(rows),
            "good": n_good,
            "attainment": n_good / len(rows),
            "goodput": n_good / window_s if n_good and window_s > 0 else 0.0,
            "p99_ttft_ms": _p99(rows["ttft_censored_ms"]),
            "p99_tpot_ms": _p99(rows["tpot_p99_ms"]),
        }
    return result


def tpot_slo_key(tpot_slo_ms: float) -> str:
    """The ``by_tpot_slo`` key of a TPOT SLO: its value in ms, shortest form (``"10"``)."""
    return f"{float(tpot_slo_ms):g}"


def summarize_by_tpot_slo(
    requests: pd.DataFrame, slos: Sequence[str] = SLO_NAMES
) -> dict[str, dict[str, Any]]:
    """Per TPOT SLO (key: :func:`tpot_slo_key`, ascending): the tenants of one tier.

    ``requests`` and ``share`` (of all requests), ``attainment`` (both SLOs),
    ``tpot_attainment`` (TPOT alone), ``goodput`` (whole-run window, so the tiers add
    up to the run's goodput) and ``goodput_share`` (the tier's part of all good
    requests; None when none was good).
    """
    slos = _check_slos(slos)
    out = request_outcomes(requests, slos)
    window_s = _window_s(out, slos)
    total_good = int(out["good"].sum())
    result: dict[str, dict[str, Any]] = {}
    for value, rows in out.groupby("tpot_slo_ms", sort=True):
        n_good = int(rows["good"].sum())
        result[tpot_slo_key(float(value))] = {
            "requests": len(rows),
            "share": len(rows) / len(out),
            "attainment": n_good / len(rows),
            "tpot_attainment": float(rows["tpot_met"].mean()),
            "goodput": n_good / window_s if n_good and window_s > 0 else 0.0,
            "goodput_share": n_good / total_good if total_good else None,
        }
    return result
