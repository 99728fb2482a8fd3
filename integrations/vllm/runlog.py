"""The plug-in's online-validation log: a servecal run folder written from a live server.

Every step vLLM executed becomes one row of ``iterations.parquet`` in the engine's
schema (:data:`servecal.sched.engine.ITERATION_COLUMNS`, plus ``planned_chunk``,
``token_budget`` and ``raw_ms``); every request one row of ``requests.parquet``
(:data:`servecal.sched.result.REQUEST_COLUMNS`, plus vLLM's ``request_id``). So
``servecal validate TABLE RUN_DIR`` gates the table on production traffic and
``servecal report RUN_DIR`` draws predicted against actual.

The folder is rewritten whole (atomically, through :func:`write_run`) every
``flush_every`` steps and at shutdown. The writing runs on a background thread
from a snapshot, so the serving loop only pays for copying its buffers. Per step
the loop appends one row (to a list: numpy blocks are made every 256 rows) and one
step end time; a request's tokens are kept as streaks of consecutive steps, so a
step costs nothing per decoding request, and its TPOT statistics are derived from
the step end times when the folder is written. Predictions are not computed per step either: each
write asks the table, vectorised, about the rows it has not seen, and a finished
request's row is built once. Each write still rewrites the whole folder, O(run
length), on the writer thread (which shares the GIL with the serving loop): 0.8 s
for a 200,000-step, 20,000-request log on a loaded 2-core machine, so keep
``flush_every`` in the thousands for long runs (docs/results/2026-12-01-vllm-plugin.md).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from servecal.costmodels.errors import InputError
from servecal.costmodels.predictor import PLAN_QUANTILE, Predictor

log = logging.getLogger(__name__)

#: Fields of one logged step, in order (all floats in the buffer).
STEP_FIELDS = (
    "start_ms",
    "duration_ms",
    "n_decode",
    "chunk",
    "n_prefills",
    "ctx",
    "prefix",
    "decision_us",
    "budget_ms",
    "planned_chunk",
    "token_budget",
    "raw_ms",
)
_INT_FIELDS = ("n_decode", "chunk", "n_prefills", "planned_chunk")
_BATCH = 256  # rows kept as Python lists before they become a numpy block


class _Rows:
    """Append-only float rows: the serving loop appends the row itself (one list
    append, no numpy per step: in place after vLLM's step a numpy row assignment
    costs tens of µs); every ``_BATCH`` rows they become one numpy block."""

    def __init__(self, width: int) -> None:
        self._width = width
        self._blocks: list[np.ndarray] = []
        self._pending: list[Any] = []
        self._n = 0

    def append(self, row: Any) -> None:
        """Add ``row`` (a sequence of ``width`` floats, not changed afterwards)."""
        pending = self._pending
        pending.append(row)
        if len(pending) >= _BATCH:
            self._blocks.append(np.array(pending, dtype=float).reshape(-1, self._width))
            self._n += len(pending)
            self._pending = []

    def __len__(self) -> int:
        return self._n + len(self._pending)

    def snapshot(self) -> np.ndarray:
        """All rows so far, as one array (a copy: the writer may keep it)."""
        tail = np.array(self._pending, dtype=float).reshape(-1, self._width)
        return np.concatenate([*self._blocks, tail])


class _Track:
    """One request as the log follows it (times in ms since the run started).

    Its tokens are kept as *streaks* of consecutive logged steps ``[a, b]`` (an open
    streak has ``b = None``): a decoding request emits a token in every step it runs,
    so a step costs the log nothing per request, only a streak's start and end do.
    """

    __slots__ = ("rid", "request_id", "arrival_ms", "prompt_tokens", "max_tokens",
                 "ttft_slo_ms", "tpot_slo_ms", "streaks", "recomputes", "done_ms",
                 "tokens_out", "row")  # fmt: skip

    def __init__(self, rid: int, request_id: str, arrival_ms: float, prompt_tokens: int,
                 max_tokens: int, ttft_slo_ms: float, tpot_slo_ms: float) -> None:  # fmt: skip
        self.rid = rid
        self.request_id = request_id
        self.arrival_ms = arrival_ms
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.ttft_slo_ms = ttft_slo_ms
        self.tpot_slo_ms = tpot_slo_ms
        self.streaks: list[list[Any]] = []
        self.recomputes = 0  # vLLM preempts by freeing the KV: a recompute
        self.done_ms = math.nan
        self.tokens_out: int | None = None
        self.row: dict[str, Any] | None = None  # a finished request's row, once built

    def open(self) -> bool:
        return bool(self.streaks) and self.streaks[-1][1] is None

    def frozen(self, last: int) -> _Track:
        """A copy whose open streak ends at step ``last`` (for a snapshot)."""
        copy = _Track.__new__(_Track)
        for name in _Track.__slots__:
            setattr(copy, name, getattr(self, name))
        copy.streaks = [[a, last if b is None else b] for a, b in self.streaks]
        return copy


def _token_steps(t: _Track) -> np.ndarray:
    """Indices of the logged steps in which ``t`` got a token, in order."""
    parts = [np.arange(a, b + 1) for a, b in t.streaks if b is not None and b >= a]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _request_row(t: _Track, ends: np.ndarray) -> dict[str, Any]:
    """The requests-frame row of ``t``: its token times are the ends of the steps of
    its streaks (TPOT statistics by the engine's own function)."""
    from servecal.sched.request import Request
    from servecal.sched.result import REQUEST_COLUMNS, append_request_row

    steps = _token_steps(t)
    steps = steps[steps < len(ends)]
    times = ends[steps]
    finished = not math.isnan(t.done_ms)
    tokens = int(t.tokens_out) if t.tokens_out is not None else int(times.size)
    rows: dict[str, list[Any]] = {c: [] for c in REQUEST_COLUMNS}
    req = Request(
        t.rid,
        max(0.0, t.arrival_ms),
        max(1, t.prompt_tokens),
        max(1, tokens if finished else t.max_tokens),
        t.ttft_slo_ms,
        t.tpot_slo_ms,
    )
    append_request_row(
        rows,
        req,
        first_ms=float(times[0]) if times.size else math.nan,
        done_ms=t.done_ms,
        tokens_out=tokens,
        gaps=np.diff(times),
        recomputes=t.recomputes,
        parks=0,
        slo_exception=False,
        rejected=False,
    )
    row = {k: v[0] for k, v in rows.items()}
    row["request_id"] = t.request_id
    return row


def _predicted(n: int, query: Callable[[], Any]) -> np.ndarray:
    """A prediction column; NaN where the table has no such answer (no P99, no margin)."""
    try:
        return np.broadcast_to(np.asarray(query(), dtype=float), (n,)).copy()
    except InputError:
        return np.full(n, np.nan)


class RunLog:
    """Steps and requests of one vLLM run, flushed to ``folder`` as a servecal run.

    The serving loop reports each executed step (:meth:`step`, which numbers it) and
    the few request events of that step: a first token (:meth:`started`), a request
    that did not run (:meth:`stopped`), one that left (:meth:`finished`).
    """

    def __init__(
        self,
        folder: Path,
        predictor: Predictor,
        config: dict[str, Any],
        flush_every: int = 1000,
    ) -> None:
        self.folder = Path(folder)
        self._predictor = predictor
        self._config = config
        self._flush_every = flush_every
        self._rows = _Rows(len(STEP_FIELDS))
        self._ends: list[float] = []  # end of each logged step (ms): the token times
        self._since_flush = 0
        self._tracks: dict[str, _Track] = {}
        self._done: list[_Track] = []
        self._next_rid = 0
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="servecal-runlog")
        self._pending: Future[Any] | None = None
        self._lock = threading.Lock()
        self._predicted: tuple[np.ndarray, ...] = (np.zeros(0),) * 3  # rows done so far
        self.flushes = 0

    # -- the serving loop's side (cheap) ------------------------------------------------
    def step(self, row: Sequence[float]) -> int:
        """Log one executed step (fields in :data:`STEP_FIELDS` order, not changed
        afterwards); its index."""
        index = len(self._ends)
        self._rows.append(row)
        self._ends.append(row[0] + row[1])
        self._since_flush += 1
        if self._since_flush >= self._flush_every:
            self.flush(wait=False)
        return index

    def arrived(self, request_id: str, arrival_ms: float, prompt_tokens: int, max_tokens: int,
                ttft_slo_ms: float, tpot_slo_ms: float) -> None:  # fmt: skip
        """A request entered the scheduler."""
        self._tracks[request_id] = _Track(
            self._next_rid, request_id, arrival_ms, prompt_tokens, max_tokens,
            ttft_slo_ms, tpot_slo_ms,
        )  # fmt: skip
        self._next_rid += 1

    def started(self, request_id: str, step: int) -> None:
        """``request_id`` got a token in ``step`` and will in each step it runs next."""
        t = self._tracks.get(request_id)
        if t is not None and not t.open():
            t.streaks.append([step, None])

    def stopped(self, request_id: str, last: int) -> None:
        """``request_id`` did not run after step ``last`` (skipped or preempted)."""
        t = self._tracks.get(request_id)
        if t is not None and t.open():
            t.streaks[-1][1] = last

    def preempted(self, request_id: str, last: int) -> None:
        t = self._tracks.get(request_id)
        if t is not None:
            t.recomputes += 1
            self.stopped(request_id, last)

    def finished(self, request_id: str, now_ms: float, last: int, tokens_out: int) -> None:
        """The request left the scheduler (done or aborted) at ``now_ms``; its last
        token, if it was decoding, came in step ``last``."""
        t = self._tracks.pop(request_id, None)
        if t is None:
            return
        if t.open():
            t.streaks[-1][1] = last
        t.tokens_out = tokens_out
        t.done_ms = now_ms if tokens_out > 0 else math.nan  # aborted before any token
        self._done.append(t)

    @property
    def steps(self) -> int:
        return len(self._ends)

    # -- writing ------------------------------------------------------------------------
    def flush(self, wait: bool = True) -> None:
        """Write the folder from a snapshot; ``wait=False`` hands the work to the writer
        thread (skipped if the previous write is still running: the next one has it all)."""
        if self._pending is not None and not self._pending.done():
            if not wait:
                return
            self._pending.result()
        self._since_flush = 0
        snapshot = self._snapshot()
        if wait:
            self._write(*snapshot)
        else:
            self._pending = self._writer.submit(self._write_logged, *snapshot)

    def close(self) -> None:
        """Final write (waits for it) and stop the writer thread."""
        self.flush(wait=True)
        self._writer.shutdown(wait=True)

    def _snapshot(self) -> tuple[np.ndarray, np.ndarray, list[_Track]]:
        last = len(self._ends) - 1
        live = [t.frozen(last) for t in self._tracks.values()]
        ends = np.asarray(self._ends, dtype=float)
        return self._rows.snapshot(), ends, [*self._done, *live]

    def _write_logged(self, steps: np.ndarray, ends: np.ndarray, tracks: list[_Track]) -> None:
        try:
            self._write(steps, ends, tracks)
        except Exception:  # noqa: BLE001 - a failed write must not take the server down
            log.exception("servecal: could not write the run folder %s", self.folder)

    def _write(self, steps: np.ndarray, ends: np.ndarray, tracks: list[_Track]) -> None:
        import pandas as pd

        from servecal.sched.engine import ITERATION_COLUMNS
        from servecal.sched.metrics import summarize
        from servecal.sched.result import REQUEST_COLUMNS, RunResult
        from servecal.sched.runfolder import write_run

        iterations = self._iterations(steps, ITERATION_COLUMNS)
        requests = []
        for t in tracks:  # a finished request's row never changes: built once
            row = t.row if t.row is not None else _request_row(t, ends)
            if not math.isnan(t.done_ms) or t.tokens_out is not None:
                t.row = row
            requests.append(row)
        frame = pd.DataFrame(requests, columns=[*REQUEST_COLUMNS, "request_id"])
        frame = frame.astype(
            {"rid": np.int64, "tokens_out": np.int64, "recomputes": np.int64, "parks": np.int64}
        )
        summary = summarize(frame, iterations)
        result = RunResult.from_frames(
            requests=frame,
            iterations=iterations,
            plan_calls=len(iterations),
            energy_source="none",
        )
        with self._lock:
            write_run(self.folder, result, self._config, summary, {})
            self.flushes += 1

    def _predictions(self, n: int, args: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        """P50, P99 and margin for every row, in one vectorised call each.

        A cost table is asked through ``lookup``, which does not count queries in its
        ``out_of_domain`` (that counter belongs to the serving loop's own queries).
        """
        p: Any = self._predictor
        if hasattr(p, "lookup") and hasattr(p, "lookup_bound"):
            p50 = _predicted(n, lambda: p.lookup(0.5, *args)[0])
            p99 = _predicted(n, lambda: p.lookup(PLAN_QUANTILE, *args)[0])
            margin = _predicted(n, lambda: p.lookup_bound(*args)) - p99
            return p50, p99, margin
        return (
            _predicted(n, lambda: p.predict(*args, q=0.5)),
            _predicted(n, lambda: p.predict(*args, q=PLAN_QUANTILE)),
            _predicted(n, lambda: p.margin(*args)),
        )

    def _iterations(self, steps: np.ndarray, order: tuple[str, ...]) -> Any:
        import pandas as pd

        n = len(steps)
        cols: dict[str, Any] = {name: steps[:, k] for k, name in enumerate(STEP_FIELDS)}
        for name in _INT_FIELDS:
            cols[name] = cols[name].astype(np.int64)
        # rows already predicted by an earlier write keep their predictions (the table
        # does not change): each write asks the table about the new rows only
        done = len(self._predicted[0])
        new = tuple(cols[c][done:] for c in ("n_decode", "chunk", "ctx", "prefix"))
        fresh = self._predictions(n - done, new)
        self._predicted = tuple(
            np.concatenate([old, add]) for old, add in zip(self._predicted, fresh, strict=True)
        )
        cols["pred_p50_ms"], cols["pred_p99_ms"], cols["margin_ms"] = self._predicted
        cols["energy_j"] = np.full(n, np.nan)  # the plug-in has no energy meter
        extra = [f for f in STEP_FIELDS if f not in order]
        return pd.DataFrame({name: cols[name] for name in (*order, *extra)})
