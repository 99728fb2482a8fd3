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
from servecal.sched.request import Request

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


def _gaps(live: LiveRequest, ends: np.ndarray, durations: np.ndarray, last: int) -> np.ndarray:
    """Inter-token gaps of ``live``.

    Inside a streak the iterations run back to back, so a gap *is* the next
    iteration's duration: taken from the durations, not from differences of absolute
    end times, which float rounding would push a hair over a deadline the iteration
    met exactly. Between streaks (skipped decodes, a recompute) the gap is the
    difference of the two token times.
    """
    spans = list(live._streaks)
    if live._streaking:
        spans.append((live._sync_iter, last))
    if not spans:
        return ends[:0]
    if len(spans) == 1:
        a, b = spans[0]
        return durations[a + 1 : b + 1]
    parts = []
    for k, (a, b) in enumerate(spans):
        if k:
            parts.append(ends[a : a + 1] - ends[spans[k - 1][1]])
        parts.append(durations[a + 1 : b + 1])
    return np.concatenate(parts)


def append_request_row(
    rows: dict[str, list[Any]],
    req: Request,
    *,
    first_ms: float,
    done_ms: float,
    tokens_out: int,
    gaps: np.ndarray,
    preemptions: int,
    slo_exception: bool,
    rejected: bool,
) -> None:
    """Append one request's row (``REQUEST_COLUMNS``) given its inter-token ``gaps``.

    The one place the per-request TPOT statistics are derived, for every driver
    (the iteration engine and FlowPrefill's operator-level driver)."""
    rows["rid"].append(req.rid)
    rows["arrival_ms"].append(req.arrival_ms)
    rows["prompt_tokens"].append(req.prompt_tokens)
    rows["output_tokens"].append(req.output_tokens)
    rows["ttft_slo_ms"].append(req.ttft_slo_ms)
    rows["tpot_slo_ms"].append(req.tpot_slo_ms)
    rows["slo_class"].append(req.slo_class)
    rows["first_token_ms"].append(first_ms)
    rows["completion_ms"].append(done_ms)
    rows["tokens_out"].append(tokens_out)
    rows["tpot_p99_ms"].append(p99(gaps) if gaps.size else math.nan)
    rows["tpot_mean_ms"].append(float(gaps.mean()) if gaps.size else math.nan)
    rows["tpot_max_ms"].append(float(gaps.max()) if gaps.size else math.nan)
    rows["preemptions"].append(preemptions)
    rows["slo_exception"].append(slo_exception)
    rows["rejected"].append(rejected)


def _request_rows(engine: Engine) -> dict[str, list[Any]]:
    ends = np.asarray(engine._clock.ends, dtype=float)
    durations = np.array([row[1] for row in engine._rows], dtype=float)
    last = engine._clock.last_iter
    rows: dict[str, list[Any]] = {c: [] for c in REQUEST_COLUMNS}
    live_by_rid = engine._live
    for req in engine._pending:
        live = live_by_rid.get(req.rid)
        gaps = _gaps(live, ends, durations, last) if live is not None else ends[:0]
        append_request_row(
            rows,
            req,
            first_ms=live._first_ms if live is not None else math.nan,
            done_ms=live._done_ms if live is not None else math.nan,
            tokens_out=live.tokens_out if live is not None else 0,
            gaps=gaps,
            preemptions=live._preemptions if live is not None else 0,
            slo_exception=bool(live._exception) if live is not None else False,
            rejected=live is not None and live._phase == Phase.REJECTED,
        )
    return rows


def _logged(n: int, query: Callable[[], Any]) -> np.ndarray:
    """A predictor column for the log; NaN where the predictor has no such answer (a
    P50-only cost table has no P99 and no margin)."""
    if n == 0:
        return np.zeros(0)
    try:
        return np.broadcast_to(np.asarray(query(), dtype=float), (n,)).copy()
    except InputError:
        return np.full(n, np.nan)


def _iterations(engine: Engine) -> pd.DataFrame:
    from servecal.sched.engine import ITERATION_COLUMNS, ROW_COLUMNS

    n = len(engine._rows)
    table = np.array(engine._rows, dtype=float).reshape(n, len(ROW_COLUMNS))
    cols: dict[str, Any] = {name: table[:, k] for k, name in enumerate(ROW_COLUMNS)}
    for name in ("n_decode", "chunk", "n_prefills"):
        cols[name] = cols[name].astype(np.int64)
    if len(engine._pred_rows) == n and n:
        pred = np.array(engine._pred_rows, dtype=float)
        cols["pred_p50_ms"], cols["pred_p99_ms"], cols["margin_ms"] = pred.T
    else:  # no observers: one vectorised predictor call per column, at the end
        p = engine._predictor
        args = (cols["n_decode"], cols["chunk"], cols["ctx"], cols["prefix"])
        cols["pred_p50_ms"] = _logged(n, lambda: p.predict(*args, q=0.5))
        cols["pred_p99_ms"] = _logged(n, lambda: p.predict(*args, q=PLAN_QUANTILE))
        cols["margin_ms"] = _logged(n, lambda: p.margin(*args))
    frame = pd.DataFrame({name: cols[name] for name in ITERATION_COLUMNS})
    for key, values in engine._extra.items():
        frame[key] = values + [None] * (n - len(values))
    return frame


def build_result(engine: Engine) -> RunResult:
    """Assemble the frames of ``engine``'s run."""
    iterations = _iterations(engine)
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
