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
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from servecal.sched.result import REQUEST_COLUMNS as RESULT_COLUMNS
from servecal.sched.result import median, p99
from servecal.util.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

SLO_NAMES = ("ttft", "tpot")

#: Columns of the requests frame that the metrics need (a run's frame has more:
#: :data:`servecal.sched.result.REQUEST_COLUMNS`).
REQUEST_COLUMNS = tuple(
    c for c in RESULT_COLUMNS if c not in ("slo_class", "tpot_mean_ms", "tpot_max_ms",
                                            "slo_exception", "rejected")
)  # fmt: skip

#: What the metrics read: a pandas frame, or any mapping of column name → values
#: (a run's numpy columns, ``RunResult.request_columns``). Computed in numpy either
#: way, so a simulated run is scored without pandas.
Frame = Mapping[str, Any]

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


def _require(frame: Frame, columns: Iterable[str], what: str) -> None:
    missing = [c for c in columns if c not in frame]
    if missing:
        raise InputError(f"{what} frame lacks column(s) {', '.join(missing)}")


def _num(frame: Frame, name: str) -> np.ndarray:
    """Column ``name`` as floats (None → NaN)."""
    return np.asarray(frame[name], dtype=float)


def _flags(values: Any) -> np.ndarray:
    """A yes/no column; a missing value (None, NaN) is no."""
    a = np.asarray(values)
    if a.dtype == bool:
        return a
    if a.dtype.kind in "fiu":
        return np.nan_to_num(a.astype(float), nan=0.0) != 0
    return np.array([not _missing(v) and bool(v) for v in a], dtype=bool)


def _missing(value: Any) -> bool:
    """None, NaN or pandas' NA (whose comparisons answer NA, not a bool)."""
    if value is None:
        return True
    try:
        return bool(value != value)
    except TypeError:
        return True


def _present(values: np.ndarray) -> np.ndarray:
    """``values`` without its NaNs."""
    return values[~np.isnan(values)]


def _groups(values: Any) -> list[tuple[Any, np.ndarray]]:
    """``(key, row indices)`` per distinct present value, keys ascending (a groupby)."""
    a = np.asarray(values)
    if a.dtype.kind in "fiu":
        present = ~np.isnan(a.astype(float))
    else:
        a = a.astype(object)
        present = np.array([not _missing(v) for v in a], dtype=bool)
    return [(k, np.flatnonzero(present & (a == k))) for k in sorted(set(a[present].tolist()))]


def outcome_columns(requests: Frame, slos: Sequence[str] = SLO_NAMES) -> dict[str, np.ndarray]:
    """Per request: ``finished, ttft_ms, ttft_met, tpot_met, good`` (numpy columns).

    ``ttft_ms`` is NaN for a request with no first token; ``ttft_met`` is then False.
    ``tpot_met`` is False for an unfinished request that has no gap yet.
    """
    slos = _check_slos(slos)
    _require(requests, REQUEST_COLUMNS, "requests")
    finished = ~np.isnan(_num(requests, "completion_ms"))
    ttft = _num(requests, "first_token_ms") - _num(requests, "arrival_ms")
    tpot = _num(requests, "tpot_p99_ms")
    with np.errstate(invalid="ignore"):  # NaN compares as False, as a missing value should
        ttft_met = ttft <= _num(requests, "ttft_slo_ms")
        has_gap = ~np.isnan(tpot)
        one_token_done = finished & (_num(requests, "output_tokens") <= 1)
        gap_ok = (tpot <= _num(requests, "tpot_slo_ms")) & has_gap
    tpot_met = gap_ok | (~has_gap & one_token_done)
    good = np.ones(finished.size, dtype=bool)
    if "ttft" in slos:
        good &= ttft_met
    if "tpot" in slos:
        good &= tpot_met & finished
    return {
        "finished": finished,
        "ttft_ms": ttft,
        "ttft_met": ttft_met,
        "tpot_met": tpot_met,
        "good": good,
    }


def request_outcomes(requests: pd.DataFrame, slos: Sequence[str] = SLO_NAMES) -> pd.DataFrame:
    """A copy of the requests frame with ``ttft_ms, ttft_met, tpot_met, finished, good``
    (:func:`outcome_columns`)."""
    outcomes = outcome_columns(requests, slos)
    out = requests.copy()
    for name in ("finished", "ttft_ms", "ttft_met", "tpot_met", "good"):
        out[name] = outcomes[name]
    return out


def _run_end_ms(requests: Frame) -> float:
    """Last event of the run: the latest completion, first token or arrival."""
    times = _present(
        np.concatenate(
            [_num(requests, c) for c in ("completion_ms", "first_token_ms", "arrival_ms")]
        )
    )
    return float(times.max()) if times.size else math.nan


def _window_s(requests: Frame, slos: Sequence[str]) -> float:
    """First arrival → last completion (last first token when TPOT is not judged), in s."""
    closes = _present(_num(requests, "completion_ms" if "tpot" in slos else "first_token_ms"))
    arrivals = _present(_num(requests, "arrival_ms"))
    if not closes.size or not arrivals.size:
        return 0.0
    return (float(closes.max()) - float(arrivals.min())) / 1000.0


def _rejected(requests: Frame, n: int) -> np.ndarray:
    """Requests the engine refused (admission control, too large for KV); optional column."""
    return _flags(requests["rejected"]) if "rejected" in requests else np.zeros(n, dtype=bool)


def _censored_ttft(requests: Frame, ttft_ms: np.ndarray) -> np.ndarray:
    """TTFT with never-served requests counted as end of run − arrival (a lower bound).

    Rejected requests are left out (NaN): they were refused, not kept waiting; they
    count as not good and are reported by number.
    """
    waited = _run_end_ms(requests) - _num(requests, "arrival_ms")
    censored = np.where(np.isnan(ttft_ms), waited, ttft_ms)
    censored[_rejected(requests, ttft_ms.size)] = math.nan
    return censored


def _p99(values: np.ndarray) -> float | None:
    v = _present(np.asarray(values, dtype=float))
    return p99(v) if v.size else None


def _rows(frame: Frame, column: str) -> int:
    return int(np.asarray(frame[column]).size)


def _energy(iterations: Frame | None) -> float | None:
    """Run energy in J, or None when any iteration lacks a reading (a partial sum lies)."""
    if iterations is None or "energy_j" not in iterations:
        return None
    e = _num(iterations, "energy_j")
    return None if not e.size or np.isnan(e).any() else float(e.sum())


def _online(iterations: Frame | None) -> dict[str, float | None]:
    """P50 MAPE (fraction of actual) and coverage of actual ≤ P99 + margin."""
    result: dict[str, float | None] = {"p50_mape": None, "p99_coverage": None}
    if iterations is None or not _rows(iterations, "duration_ms"):
        return result
    actual = _num(iterations, "duration_ms")
    if "pred_p50_ms" in iterations:
        p50 = _num(iterations, "pred_p50_ms")
        with np.errstate(invalid="ignore"):
            ok = ~np.isnan(p50) & (actual > 0)
        if ok.any():
            result["p50_mape"] = float((np.abs(actual[ok] - p50[ok]) / actual[ok]).mean())
    if "pred_p99_ms" in iterations:
        p99 = _num(iterations, "pred_p99_ms")
        ok = ~np.isnan(p99)
        if ok.any():
            margin = (
                _num(iterations, "margin_ms") if "margin_ms" in iterations else np.zeros_like(p99)
            )
            bound = p99[ok] + np.nan_to_num(margin[ok], nan=0.0)
            result["p99_coverage"] = float((actual[ok] <= bound).mean())
    return result


def summarize(
    requests: Frame,
    iterations: Frame | None = None,
    slos: Sequence[str] = SLO_NAMES,
) -> dict[str, Any]:
    """The headline numbers of one run (keys in the module docstring and docs/workloads.md).

    ``requests``/``iterations``: pandas frames or a run's numpy columns (:data:`Frame`).
    Undefined values are None (no energy meter, no good request to divide by, no
    iterations frame), never NaN, so the dict serialises as plain JSON. A run with
    several SLO classes also gets ``by_class`` (see :func:`summarize_by_class`), one with
    several TPOT SLOs ``by_tpot_slo`` (see :func:`summarize_by_tpot_slo`).
    """
    out = outcome_columns(requests, slos)
    n = out["good"].size
    n_good = int(out["good"].sum())
    n_finished = int(out["finished"].sum())
    window_s = _window_s(requests, slos)
    goodput = n_good / window_s if n_good and window_s > 0 else 0.0
    censored_ttft = _present(_censored_ttft(requests, out["ttft_ms"]))

    energy = _energy(iterations)
    tokens = float(np.nansum(_num(requests, "tokens_out")))
    decision = np.zeros(0)
    if iterations is not None:
        _require(iterations, ("duration_ms", "decision_us"), "iterations")
        decision = _present(_num(iterations, "decision_us"))
    summary = {
        "requests": n,
        "finished": n_finished,
        "good": n_good,
        "goodput": goodput,
        "attainment": n_good / n if n else 0.0,
        "p99_ttft_ms": _p99(censored_ttft),
        "mean_ttft_ms": float(censored_ttft.mean()) if censored_ttft.size else None,
        "p99_tpot_ms": _p99(_num(requests, "tpot_p99_ms")),
        "energy_j": energy,
        "energy_per_good_request_j": energy / n_good if energy is not None and n_good else None,
        "energy_per_output_token_j": energy / tokens if energy is not None and tokens else None,
        "iterations": None if iterations is None else _rows(iterations, "duration_ms"),
        "recomputes": int(np.nansum(_num(requests, "recomputes"))),
        "parks": int(np.nansum(_num(requests, "parks"))),
        "rejected": int(_rejected(requests, n).sum()),
        "decision_us_median": median(decision) if decision.size else None,
        "online": _online(iterations),
    }
    summary.update(_prefix_cache(requests))
    if "slo_class" in requests and len(_groups(requests["slo_class"])) > 1:
        summary["by_class"] = _by_class(requests, out, window_s)
    if len(_groups(_num(requests, "tpot_slo_ms"))) > 1:
        summary["by_tpot_slo"] = _by_tpot_slo(requests, out, window_s)
    return summary


def _prefix_cache(requests: Frame) -> dict[str, Any]:
    """``prefix_hit_share`` (prompt tokens the prefix cache served / prompt tokens) of
    a run with a prefix cache (its ``cached_tokens`` column); nothing otherwise."""
    if "cached_tokens" not in requests:
        return {}
    prompt = float(np.nansum(_num(requests, "prompt_tokens")))
    cached = float(np.nansum(_num(requests, "cached_tokens")))
    return {"prefix_hit_share": cached / prompt if prompt else None}


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
        result.update(_seed_mean(key, [s.get(key) for s in summaries]))
    result["seeds"] = len(summaries)
    return result


def _seed_mean(key: str, values: list[Any]) -> dict[str, Any]:
    """``key``'s entries in the mean over seeds of ``values`` (one per seed): the mean
    (and ``<key>_std`` for :data:`MAIN_METRICS`), a nested mean, the value every seed
    agrees on, or nothing."""
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, dict) for v in present):
        nested = mean_over_seeds(present)
        nested.pop("seeds", None)
        return {key: nested}
    if present and all(_is_number(v) for v in present):
        mean, std = _mean_std(present)
        return {key: mean, f"{key}_std": std} if key in MAIN_METRICS else {key: mean}
    if not present:
        return {key: None, f"{key}_std": None} if key in MAIN_METRICS else {key: None}
    if all(v == present[0] for v in values):
        return {key: present[0]}
    return {}


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def summarize_by_class(
    requests: Frame, slos: Sequence[str] = SLO_NAMES
) -> dict[str, dict[str, Any]]:
    """Per ``slo_class``: requests, good, attainment, goodput, P99 TTFT and P99 TPOT.

    Every class's goodput uses the whole run's window, so the classes' goodputs add
    up to the run's goodput; TTFTs are censored at the end of the whole run.
    """
    _require(requests, ("slo_class",), "requests")
    return _by_class(requests, outcome_columns(requests, slos), _window_s(requests, slos))


def _by_class(
    requests: Frame, out: dict[str, np.ndarray], window_s: float
) -> dict[str, dict[str, Any]]:
    censored = _censored_ttft(requests, out["ttft_ms"])
    tpot = _num(requests, "tpot_p99_ms")
    result: dict[str, dict[str, Any]] = {}
    for name, rows in _groups(requests["slo_class"]):
        n_good = int(out["good"][rows].sum())
        result[str(name)] = {
            "requests": rows.size,
            "good": n_good,
            "attainment": n_good / rows.size,
            "goodput": n_good / window_s if n_good and window_s > 0 else 0.0,
            "p99_ttft_ms": _p99(censored[rows]),
            "p99_tpot_ms": _p99(tpot[rows]),
        }
    return result


def tpot_slo_key(tpot_slo_ms: float) -> str:
    """The ``by_tpot_slo`` key of a TPOT SLO: its value in ms, shortest form (``"10"``)."""
    return f"{float(tpot_slo_ms):g}"


def summarize_by_tpot_slo(
    requests: Frame, slos: Sequence[str] = SLO_NAMES
) -> dict[str, dict[str, Any]]:
    """Per TPOT SLO (key: :func:`tpot_slo_key`, ascending): the tenants of one tier.

    ``requests`` and ``share`` (of all requests), ``attainment`` (both SLOs),
    ``tpot_attainment`` (TPOT alone), ``goodput`` (whole-run window, so the tiers add
    up to the run's goodput) and ``goodput_share`` (the tier's part of all good
    requests; None when none was good).
    """
    return _by_tpot_slo(requests, outcome_columns(requests, slos), _window_s(requests, slos))


def _by_tpot_slo(
    requests: Frame, out: dict[str, np.ndarray], window_s: float
) -> dict[str, dict[str, Any]]:
    good, n = out["good"], out["good"].size
    total_good = int(good.sum())
    result: dict[str, dict[str, Any]] = {}
    for value, rows in _groups(_num(requests, "tpot_slo_ms")):
        n_good = int(good[rows].sum())
        result[tpot_slo_key(float(value))] = {
            "requests": rows.size,
            "share": rows.size / n,
            "attainment": n_good / rows.size,
            "tpot_attainment": float(out["tpot_met"][rows].mean()),
            "goodput": n_good / window_s if n_good and window_s > 0 else 0.0,
            "goodput_share": n_good / total_good if total_good else None,
        }
    return result
