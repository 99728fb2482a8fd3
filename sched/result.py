"""A finished run: its requests and iterations as columns (schemas in docs/engine.md).

A run keeps plain numpy columns; the pandas frames (``RunResult.requests``,
``RunResult.iterations``) are built on first use. The simulate path (metrics,
run folder) reads the columns, so a simulated run never imports pandas (a third
of a short ``servecal simulate``'s wall time).

Per-request TPOT statistics come from the iteration end times: a request's tokens
are emitted at the ends of the iterations of its streaks, so its inter-token gaps
are differences of those end times. Computed once here, never per iteration.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from servecal.costmodels.predictor import TAIL_QUANTILE
from servecal.sched.live import LiveRequest, Phase
from servecal.sched.request import Request
from servecal.util.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

    from servecal.sched.engine import Engine

#: Columns of the requests frame, in order, with their dtypes.
REQUEST_DTYPES: dict[str, Any] = {
    "rid": np.int64,
    "arrival_ms": float,
    "prompt_tokens": np.int64,
    "output_tokens": np.int64,
    "ttft_slo_ms": float,
    "tpot_slo_ms": float,
    "slo_class": object,
    "first_token_ms": float,
    "completion_ms": float,
    "tokens_out": np.int64,
    "tpot_p99_ms": float,
    "tpot_mean_ms": float,
    "tpot_max_ms": float,
    "recomputes": np.int64,
    "parks": np.int64,
    "slo_exception": bool,
    "rejected": bool,
}
REQUEST_COLUMNS = tuple(REQUEST_DTYPES)

#: A run's columns: name → one value per request (or per iteration), in order.
Columns = Mapping[str, np.ndarray]


def column(values: Any) -> np.ndarray:
    """One column from a list: float (None → NaN) when every value is a number or
    None, else objects (strings, mixed)."""
    try:
        return np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        return np.asarray(values, dtype=object)


def request_columns(rows: Mapping[str, list[Any]]) -> dict[str, np.ndarray]:
    """The requests' columns from :func:`append_request_row`'s lists (known dtypes)."""
    return {name: np.asarray(rows[name], dtype=REQUEST_DTYPES[name]) for name in REQUEST_COLUMNS}


def columns_of(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """A frame's columns as numpy arrays."""
    return {str(name): frame[name].to_numpy() for name in frame.columns}


def frame_of(columns: Columns) -> pd.DataFrame:
    """A pandas frame of ``columns`` (pandas is imported here, on first use)."""
    import pandas as pd

    return pd.DataFrame(dict(columns))


@dataclass(frozen=True, eq=False)
class RunResult:
    """One finished run, whatever ran it: the requests' and the iterations' columns,
    the policy's ``plan_calls``, where energy came from, the backend's own
    ``counters`` (e.g. the operator-level driver's wake-ups and blocking times) and
    the observers' summaries. All of it goes into the run folder."""

    request_columns: Columns
    iteration_columns: Columns
    plan_calls: int
    energy_source: str
    counters: dict[str, Any] = field(default_factory=dict)
    observers: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_frames(
        cls, requests: pd.DataFrame, iterations: pd.DataFrame, **rest: Any
    ) -> RunResult:
        """A run whose backend built pandas frames (kept as its frames)."""
        result = cls(columns_of(requests), columns_of(iterations), **rest)
        result.__dict__.update(requests=requests, iterations=iterations)
        return result

    @cached_property
    def requests(self) -> pd.DataFrame:
        """The requests frame (``REQUEST_COLUMNS``), built on first use."""
        return frame_of(self.request_columns)

    @cached_property
    def iterations(self) -> pd.DataFrame:
        """The iterations frame, built on first use."""
        return frame_of(self.iteration_columns)

    @property
    def recomputes(self) -> int:
        """Recompute preemptions over the run (KV freed, prefill redone)."""
        return int(np.sum(self.request_columns["recomputes"]))

    @property
    def parks(self) -> int:
        """Times requests were parked (KV and progress kept), over the run."""
        return int(np.sum(self.request_columns["parks"]))


def p99(values: np.ndarray) -> float:
    """99th percentile with linear interpolation, the same float as ``np.percentile(values,
    99)`` (its two-sided interpolation included), via a partition: ``np.percentile`` on
    small arrays costs several times more, and its first call imports ``numpy.ma``."""
    m = values.size
    pos = 0.99 * (m - 1)
    lo = int(pos)
    hi = min(lo + 1, m - 1)
    part = np.partition(values, (lo, hi))
    a, b, t = float(part[lo]), float(part[hi]), pos - lo
    # numpy's _lerp: from the nearer end, so that t = 1 gives b exactly
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t


def median(values: np.ndarray) -> float:
    """The median, the same float as ``np.median(values)`` (the mean of the middle two
    when their number is even), via a partition: ``np.median`` imports ``numpy.ma``
    on its first call."""
    m = values.size
    mid = m // 2
    if m % 2:
        return float(np.partition(values, mid)[mid])
    part = np.partition(values, (mid - 1, mid))
    return (float(part[mid - 1]) + float(part[mid])) / 2


def _gaps(live: LiveRequest, ends: np.ndarray, durations: np.ndarray) -> np.ndarray:
    """Inter-token gaps of ``live``.

    Inside a streak the iterations run back to back, so a gap *is* the next
    iteration's duration: taken from the durations, not from differences of absolute
    end times, which float rounding would push a hair over a deadline the iteration
    met exactly. Between streaks (skipped decodes, a recompute) the gap is the
    difference of the two token times.
    """
    spans = live.streaks()
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


def _token_gaps(live: LiveRequest, ends: np.ndarray, durations: np.ndarray) -> np.ndarray:
    """Inter-token gaps: the gaps between its steps, split over the tokens a step
    delivers when it delivers several (speculative decoding)."""
    gaps = _gaps(live, ends, durations)
    split = getattr(live, "token_gaps", None)
    return gaps if split is None else split(gaps)


def append_request_row(
    rows: dict[str, list[Any]],
    req: Request,
    *,
    first_ms: float,
    done_ms: float,
    tokens_out: int,
    gaps: np.ndarray,
    recomputes: int,
    parks: int,
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
    rows["recomputes"].append(recomputes)
    rows["parks"].append(parks)
    rows["slo_exception"].append(slo_exception)
    rows["rejected"].append(rejected)


def _request_rows(engine: Engine, durations: np.ndarray) -> dict[str, list[Any]]:
    """Every request's row; ``durations``: every iteration's, in order (its column)."""
    state = engine.state
    ends = np.asarray(state.clock.ends, dtype=float)
    rows: dict[str, list[Any]] = {c: [] for c in REQUEST_COLUMNS}
    for req in state.requests:
        live = state.live.get(req.rid)
        if live is None:  # never arrived (the run stopped at its horizon)
            append_request_row(
                rows, req, first_ms=math.nan, done_ms=math.nan, tokens_out=0, gaps=ends[:0],
                recomputes=0, parks=0, slo_exception=False, rejected=False,
            )  # fmt: skip
            continue
        append_request_row(
            rows,
            req,
            first_ms=live.first_token_ms,
            done_ms=live.completion_ms,
            tokens_out=live.tokens_out,
            gaps=_token_gaps(live, ends, durations),
            recomputes=live.recomputes,
            parks=live.parks,
            slo_exception=live.slo_exception,
            rejected=live.phase == Phase.REJECTED,
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


def batch_columns(
    rows: Sequence[tuple[Any, ...]],
    predictor: Any,
    predictions: Sequence[tuple[float, float, float]] | None = None,
) -> dict[str, np.ndarray]:
    """The iteration columns (``ITERATION_COLUMNS``) of ``rows`` (``ROW_COLUMNS``
    tuples): the logged ``predictions`` when observers asked for them during the run,
    else one vectorised ``predictor`` call per column. A whole run's rows, or one
    batch of a streamed run's (:mod:`servecal.sched.iteration_stream`)."""
    from servecal.sched.engine import ITERATION_COLUMNS, ROW_COLUMNS

    n = len(rows)
    table = np.array(rows, dtype=float).reshape(n, len(ROW_COLUMNS))
    cols: dict[str, Any] = {name: table[:, k] for k, name in enumerate(ROW_COLUMNS)}
    for name in ("n_decode", "chunk", "n_prefills"):
        cols[name] = cols[name].astype(np.int64)
    if predictions is not None:
        pred = np.array(predictions, dtype=float)
        cols["pred_p50_ms"], cols["pred_p99_ms"], cols["margin_ms"] = pred.T
    else:
        p = predictor
        args = (cols["n_decode"], cols["chunk"], cols["ctx"], cols["prefix"])
        cols["pred_p50_ms"] = _logged(n, lambda: p.predict(*args, q=0.5))
        cols["pred_p99_ms"] = _logged(n, lambda: p.predict(*args, q=TAIL_QUANTILE))
        cols["margin_ms"] = _logged(n, lambda: p.margin(*args))
    return {name: cols[name] for name in ITERATION_COLUMNS}


def _iterations(engine: Engine) -> Columns:
    log = engine.log
    if log.stream is not None:  # written as the run went: the file's columns
        return log.stream.finish()
    n = len(log.rows)
    logged = log.predictions if len(log.predictions) == n and n else None
    columns = batch_columns(log.rows, engine.predictor, logged)
    for key, values in log.extra.items():
        columns[key] = column(values + [None] * (n - len(values)))
    return columns


def build_result(engine: Engine) -> RunResult:
    """Assemble the columns of ``engine``'s run."""
    beyond = beyond_grid_counts(engine.predictor)  # before the log's own predictions
    iterations = _iterations(engine)
    requests = request_columns(_request_rows(engine, iterations["duration_ms"]))
    counters: dict[str, Any] = {} if beyond is None else {"beyond_grid": beyond}
    cache = engine.prefix_cache
    if cache is not None:  # only then: a run without a cache keeps today's columns
        live = engine.state.live
        requests["cached_tokens"] = np.array(
            [x.cached_tokens if (x := live.get(r.rid)) else 0 for r in engine.state.requests],
            dtype=np.int64,
        )
        counters["kv_evictions"] = cache.evictions
    summaries: dict[str, Any] = {}
    for obs in engine.observers:
        summary = getattr(obs, "summary", None)
        if callable(summary):
            summaries[type(obs).__name__] = summary()
    return RunResult(
        request_columns=requests,
        iteration_columns=iterations,
        plan_calls=engine.state.plan_calls,
        energy_source=getattr(engine.executor, "energy_source", "none"),
        observers=summaries,
        counters={**counters, **_speculative(engine)},
    )


def _speculative(engine: Engine) -> dict[str, float]:
    """Speculative decoding's counters: drafts accepted and tokens delivered per
    decode step (a request's step), over the run; nothing without it."""
    accepted = engine.log.extra.get("drafts_accepted")
    if accepted is None:
        return {}
    decodes = sum(row[2] for row in engine.log.rows)  # never streamed (refused)
    per = sum(accepted) / decodes if decodes else math.nan
    return {"accepted_per_decode": per, "tokens_per_decode": 1.0 + per}


def beyond_grid_counts(predictor: Any) -> dict[str, int] | None:
    """A cost table's clamped queries so far: ``predictions`` (each once) and per axis
    (a query beyond two axes counts on both); None for a predictor without a grid."""
    counts = getattr(predictor, "beyond_grid", None)
    if not isinstance(counts, dict):
        return None
    return {"predictions": int(predictor.out_of_domain), **counts}


def beyond_grid_line(counts: dict[str, float] | None) -> str | None:
    """One line saying how many predictions were priced at the grid's edge, or None."""
    if not counts or not counts.get("predictions"):
        return None
    axes = ", ".join(f"{a} {round(v):,}" for a, v in counts.items() if a != "predictions" and v)
    return (
        f"{round(counts['predictions']):,} predictions beyond the table's grid ({axes}): "
        "priced at the edge"
    )
