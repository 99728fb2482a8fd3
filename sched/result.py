"""A finished run: the requests and iterations frames (schemas in docs/engine.md).

Per-request TPOT statistics come from the iteration end times: a request's tokens
are emitted at the ends of the iterations of its streaks, so its inter-token gaps
are differences of those end times. Computed once here, never per iteration.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from servecal.costmodels.errors import InputError
from servecal.costmodels.predictor import PLAN_QUANTILE
from servecal.sched.live import LiveRequest, Phase

if TYPE_CHECKING:
    from servecal.sched.engine import Engine

#: Columns of the requests frame, in order.
REQUEST_COLUMNS = (
    "rid",
    "arrival_ms",
    "prompt_tokens",
    "output_tokens",
    "ttft_slo_ms",
    "tpot_slo_ms",
    "slo_class",
    "first_token_ms",
    "completion_ms",
    "tokens_out",
    "tpot_p99_ms",
    "tpot_mean_ms",
    "tpot_max_ms",
    "preemptions",
    "slo_exception",
    "rejected",
)


@dataclass(frozen=True)
class RunResult:
    """Frames plus the counters and observer summaries that go into ``run.json``."""

    requests: pd.DataFrame
    iterations: pd.DataFrame
    preemptions: int
    plan_calls: int
    energy_source: str
    observers: dict[str, Any] = field(default_factory=dict)


def p99(values: np.ndarray) -> float:
    """99th percentile with linear interpolation (numpy's default), via a partition."""
    m = values.size
    pos = 0.99 * (m - 1)
    lo = int(pos)
    hi = min(lo + 1, m - 1)
    part = np.partition(values, (lo, hi))
    return float(part[lo] + (part[hi] - part[lo]) * (pos - lo))


def _token_times(live: LiveRequest, ends: np.ndarray, last_iter: int) -> np.ndarray:
    spans = list(live._streaks)
    if live._streaking:
        spans.append((live._sync_iter, last_iter))
    if len(spans) == 1:
        a, b = spans[0]
        return ends[a : b + 1]
    return np.concatenate([ends[a : b + 1] for a, b in spans]) if spans else ends[:0]


def _request_rows(engine: Engine) -> dict[str, list[Any]]:
    ends = np.asarray(engine._clock.ends, dtype=float)
    last = engine._clock.last_iter
    rows: dict[str, list[Any]] = {c: [] for c in REQUEST_COLUMNS}
    live_by_rid = engine._live
    for req in engine._pending:
        live = live_by_rid.get(req.rid)
        gaps = np.diff(_token_times(live, ends, last)) if live is not None else ends[:0]
        rows["rid"].append(req.rid)
        rows["arrival_ms"].append(req.arrival_ms)
        rows["prompt_tokens"].append(req.prompt_tokens)
        rows["output_tokens"].append(req.output_tokens)
        rows["ttft_slo_ms"].append(req.ttft_slo_ms)
        rows["tpot_slo_ms"].append(req.tpot_slo_ms)
        rows["slo_class"].append(req.slo_class)
        rows["first_token_ms"].append(live._first_ms if live is not None else math.nan)
        rows["completion_ms"].append(live._done_ms if live is not None else math.nan)
        rows["tokens_out"].append(live.tokens_out if live is not None else 0)
        rows["tpot_p99_ms"].append(p99(gaps) if gaps.size else math.nan)
        rows["tpot_mean_ms"].append(float(gaps.mean()) if gaps.size else math.nan)
        rows["tpot_max_ms"].append(float(gaps.max()) if gaps.size else math.nan)
        rows["preemptions"].append(live._preemptions if live is not None else 0)
        rows["slo_exception"].append(bool(live._exception) if live is not None else False)
        rows["rejected"].append(live is not None and live._phase == Phase.REJECTED)
    return rows


def _logged(n: int, query: Callable[[], Any]) -> np.ndarray:
    """A predictor column for the log; NaN where the predictor has no such answer (a
    P50-only cost table has no P99 and no margin)."""
    try:
        return np.broadcast_to(np.asarray(query(), dtype=float), (n,))
    except InputError:
        return np.full(n, np.nan)


def build_result(engine: Engine) -> RunResult:
    """Assemble the frames of ``engine``'s run."""
    cols = engine._cols
    n = len(cols["start_ms"])
    if len(cols["pred_p50_ms"]) != n:  # no observers: one vectorised predictor call each
        p = engine._predictor
        shape = [np.asarray(cols[k], dtype=float) for k in ("n_decode", "chunk", "ctx", "prefix")]
        if n:
            nd, ch = shape[0].astype(np.int64), shape[1].astype(np.int64)
            cols["pred_p50_ms"] = np.asarray(p.predict(nd, ch, shape[2], shape[3], q=0.5))
            cols["pred_p99_ms"] = np.asarray(p.predict(nd, ch, shape[2], shape[3], q=PLAN_QUANTILE))
            cols["margin_ms"] = np.broadcast_to(
                np.asarray(p.margin(nd, ch, shape[2], shape[3]), dtype=float), (n,)
            )
        else:
            for key in ("pred_p50_ms", "pred_p99_ms", "margin_ms"):
                cols[key] = []
    frame = {k: np.asarray(v) for k, v in cols.items()}
    iterations = pd.DataFrame(
        {
            **{k: frame[k].astype(float) for k in ("start_ms", "duration_ms", "ctx", "prefix")},
            "n_decode": frame["n_decode"].astype(np.int64),
            "chunk": frame["chunk"].astype(np.int64),
            "n_prefills": frame["n_prefills"].astype(np.int64),
            **{
                k: frame[k].astype(float)
                for k in ("pred_p50_ms", "pred_p99_ms", "margin_ms", "energy_j")
            },
            "decision_us": frame["decision_us"].astype(float),
            "budget_ms": frame["budget_ms"].astype(float),
        }
    )
    iterations = iterations[list(engine._cols)]
    for key, values in engine._extra.items():
        iterations[key] = values + [None] * (n - len(values))
    requests = pd.DataFrame(_request_rows(engine))
    summaries: dict[str, Any] = {}
    for obs in engine._observers:
        summary = getattr(obs, "summary", None)
        if callable(summary):
            summaries[type(obs).__name__] = summary()
    return RunResult(
        requests=requests,
        iterations=iterations,
        preemptions=engine.preemptions,
        plan_calls=engine.plan_calls,
        energy_source=getattr(engine._executor, "energy_source", "none"),
        observers=summaries,
    )
