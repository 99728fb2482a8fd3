"""The plug-in's online-validation log: a servecal run folder that a live server appends to.

Every step vLLM executed becomes one row of ``iterations.parquet`` in the engine's
schema (:data:`servecal.sched.engine.ITERATION_COLUMNS`, plus ``planned_chunk``,
``token_budget`` and ``raw_ms``); every request one row of ``requests.parquet``
(:data:`servecal.sched.result.REQUEST_COLUMNS`, plus vLLM's ``request_id`` and
``cached_tokens``: the prompt tokens vLLM's prefix cache served it at admission, the
engine's own column, so readers give the run's ``prefix_hit_share``). So
``servecal validate TABLE RUN_DIR`` gates the table on production traffic and
``servecal report RUN_DIR`` draws predicted against actual.

**Append-only segments.** ``iterations.parquet`` and ``requests.parquet`` are
folders of parts (``part-000000.parquet``, ...: the layout pyarrow and pandas read
as one table). A writer thread appends one part to each at every flush: the steps
logged since the last one, and the requests that finished since. A flush comes
every ``flush_every`` steps *and* at least every ``flush_s`` seconds (also while the
server is idle), so a flush costs the rows since the last one, never the run's
length, and memory holds only those rows (plus the step end times that requests
still running will read their token times from). A part is written under a
hidden temporary name and renamed into place, so a part is whole or absent.

**What a stop loses: nothing served.** vLLM usually ends the engine process before
the scheduler's ``shutdown()`` runs (an ``LLM(...)`` script's exit; the API server,
on SIGTERM or SIGINT with its default ``--shutdown-timeout 0``, kills the engine's
process tree 0 s after signalling it; ``SIGKILL``), and no signal handler or
finaliser in the engine gets to run a flush before that kill. So every step, and
every request's row when it finishes, is also appended to the table's *tail*
(:mod:`servecal.costmodels.segment_tail`) in the serving loop, one ``write()``
each, before vLLM sends that step's output: whatever stops the process after that,
the kernel holds the row, and readers take the parts and then the tail. A flush
moves the tail's rows into a part and starts a new tail. Tail rows carry no
predictions and no joules (those are computed at the flush: NaN there). Requests
still running at a hard stop have no row (their steps do). A ``shutdown()`` that
does run writes everything, running requests included, into parts, removes the
tails and marks ``run.json`` closed.

**Energy.** With a meter (the device's cumulative counter, read every few steps:
:mod:`.energy`), each step's ``energy_j`` is its share of the joules read, and
``run.json``'s ``energy_source`` names the meter; without one the column is NaN and
the source ``unavailable``, never zero.

``run.json`` is written when the log starts (the settings; ``"log"`` says the
folder is segmented) and again at a clean close; it has no summary: readers
compute it from the parts, so a live folder, a killed one and a closed one read
the same way.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from servecal.costmodels.predictor import PLAN_QUANTILE, Predictor
from servecal.costmodels.segment_tail import TailWriter
from servecal.integrations.vllm.energy import UNAVAILABLE, StepEnergy
from servecal.util.atomic import atomic_path
from servecal.util.errors import InputError

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
#: The log's format, in ``run.json``'s ``"log"``.
LOG_FORMAT = "servecal.runlog/segments-1"
#: Default seconds between flushes (the most a hard stop loses, plus one write).
FLUSH_SECONDS = 5.0
#: Step end times before the oldest running request's first token are dropped once
#: this many have piled up (not at every flush: a list slice copies what it keeps).
_TRIM_AT = 4096


class _Track:
    """One request as the log follows it (times in ms since the run started).

    Its tokens are kept as *streaks* of consecutive logged steps ``[a, b]`` (an open
    streak has ``b = None``): a decoding request emits a token in every step it runs,
    so a step costs the log nothing per request, only a streak's start and end do.
    """

    __slots__ = ("rid", "request_id", "arrival_ms", "prompt_tokens", "max_tokens",
                 "ttft_slo_ms", "tpot_slo_ms", "streaks", "recomputes", "done_ms",
                 "tokens_out", "cached_tokens")  # fmt: skip

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
        self.cached_tokens = 0  # prompt tokens vLLM's prefix cache had at admission

    def open(self) -> bool:
        return bool(self.streaks) and self.streaks[-1][1] is None

    def frozen(self, last: int) -> _Track:
        """A copy whose open streak ends at step ``last`` (a running request at close)."""
        copy = _Track.__new__(_Track)
        for name in _Track.__slots__:
            setattr(copy, name, getattr(self, name))
        copy.streaks = [[a, last if b is None else b] for a, b in self.streaks]
        return copy


def _token_steps(t: _Track) -> np.ndarray:
    """Indices of the logged steps in which ``t`` got a token, in order."""
    parts = [np.arange(a, b + 1) for a, b in t.streaks if b is not None and b >= a]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _append_request(rows: dict[str, list[Any]], t: _Track, ends: np.ndarray, base: int) -> None:
    """Add ``t``'s row to the requests' columns ``rows``: its token times are the ends
    of the steps of its streaks (``ends[k]`` is step ``base + k``; TPOT statistics by
    the engine's own function)."""
    from servecal.sched.request import Request
    from servecal.sched.result import append_request_row

    steps = _token_steps(t) - base
    steps = steps[(steps >= 0) & (steps < len(ends))]
    times = ends[steps]
    finished = not math.isnan(t.done_ms)
    tokens = int(t.tokens_out) if t.tokens_out is not None else int(times.size)
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


def _open_tails(folder: Path) -> tuple[TailWriter, TailWriter]:
    """The tails of ``iterations.parquet`` (the step's fields and index, as floats)
    and of ``requests.parquet`` (the finished request's row, as JSON)."""
    from servecal.sched.result import REQUEST_COLUMNS, REQUEST_DTYPES

    step_columns = (*STEP_FIELDS, "step")
    steps = TailWriter(
        folder / "iterations.parquet",
        step_columns,
        ["int64" if c in (*_INT_FIELDS, "step") else "float64" for c in step_columns],
        key="step",
        encoding="f8",
    )
    requests = TailWriter(
        folder / "requests.parquet",
        (*REQUEST_COLUMNS, "request_id", "cached_tokens"),
        [np.dtype(REQUEST_DTYPES[c]).name for c in REQUEST_COLUMNS] + ["object", "int64"],
        key="request_id",
        encoding="json",
    )
    return steps, requests


def _predicted(n: int, query: Callable[[], Any]) -> np.ndarray:
    """A prediction column; NaN where the table has no such answer (no P99, no margin)."""
    try:
        return np.broadcast_to(np.asarray(query(), dtype=float), (n,)).copy()
    except InputError:
        return np.full(n, np.nan)


class RunLog:
    """Steps and requests of one vLLM run, appended to ``folder`` as a servecal run.

    The serving loop reports each executed step (:meth:`step`, which numbers it) and
    the few request events of that step: an arrival (:meth:`arrived`), a first token
    (:meth:`started`), a request that did not run (:meth:`stopped`), one that left
    (:meth:`finished`). A daemon thread writes; the loop only appends under a lock.
    """

    def __init__(
        self,
        folder: Path,
        predictor: Predictor,
        config: dict[str, Any],
        flush_every: int = 1000,
        flush_s: float = FLUSH_SECONDS,
        energy: StepEnergy | None = None,
        energy_source: str = UNAVAILABLE,
    ) -> None:
        self.folder = Path(folder)
        self._predictor = predictor
        self._config = config
        self._flush_every = flush_every
        self._flush_s = flush_s
        # per-step joules from the device's counter (read every few steps), or none
        self._energy = energy
        self._energy_source = energy.source if energy is not None else energy_source
        self._lock = threading.Lock()  # the loop's appends against the writer's swaps
        self._write_lock = threading.Lock()  # one flush at a time
        self._rows: list[Sequence[float]] = []  # steps since the last flush
        self._ends: list[float] = []  # step end times (ms) from step ``_base`` on
        self._base = 0
        self._tracks: dict[str, _Track] = {}
        self._done: list[dict[str, Any]] = []  # rows of the requests finished since
        self._next_rid = 0
        self._parts = 0
        self._lost_steps = 0
        self.flushes = 0
        self._closed = False
        for name in ("iterations.parquet", "requests.parquet"):
            (self.folder / name).mkdir(parents=True, exist_ok=True)
        self._write_meta(closed=False)
        # every row also goes to the kernel at once: what a stop cannot take back
        self._step_tail, self._request_tail = _open_tails(self.folder)
        self._tails_reported: list[TailWriter] = []
        self._part_failed = False
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(
            target=self._writer_loop, name="servecal-runlog", daemon=True
        )
        self._thread.start()

    # -- the serving loop's side (cheap) ------------------------------------------------
    def step(self, row: Sequence[float]) -> int:
        """Log one executed step (fields in :data:`STEP_FIELDS` order, not changed
        afterwards); its index."""
        with self._lock:
            self._rows.append(row)
            self._ends.append(row[0] + row[1])
            if self._energy is not None:
                self._energy.step(row[1] / 1000.0)
            index = self._base + len(self._ends) - 1
            self._step_tail.append_floats((*row, index))
            due = len(self._rows) >= self._flush_every
        if due:
            self._wake.set()
        return index

    def arrived(self, request_id: str, arrival_ms: float, prompt_tokens: int, max_tokens: int,
                ttft_slo_ms: float, tpot_slo_ms: float) -> None:  # fmt: skip
        """A request entered the scheduler."""
        track = _Track(self._next_rid, request_id, arrival_ms, prompt_tokens, max_tokens,
                       ttft_slo_ms, tpot_slo_ms)  # fmt: skip
        self._next_rid += 1
        with self._lock:
            self._tracks[request_id] = track

    def admitted(self, request_id: str, cached_tokens: int) -> None:
        """vLLM admitted ``request_id`` for the first time, its prefix-cache lookup
        having found ``cached_tokens`` of its prompt already computed."""
        t = self._tracks.get(request_id)
        if t is not None:
            t.cached_tokens = cached_tokens

    def started(self, request_id: str, step: int) -> None:
        """``request_id`` got a token in ``step`` and will in each step it runs next."""
        t = self._tracks.get(request_id)
        if t is not None and not t.open():
            with self._lock:
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
        with self._lock:
            t = self._tracks.pop(request_id, None)
            if t is None:
                return
            if t.open():
                t.streaks[-1][1] = last
            t.tokens_out = tokens_out
            t.done_ms = now_ms if tokens_out > 0 else math.nan  # aborted before any token
            row = self._request_row(t)
            self._done.append(row)
            self._request_tail.append_row(row)

    def _request_row(self, t: _Track) -> dict[str, Any]:
        """``t``'s row in ``requests.parquet`` (under the lock: it reads the step end
        times of its streaks, all still kept)."""
        spans = [(a, b) for a, b in t.streaks if b is not None and b >= a]
        first = min((a for a, _ in spans), default=self._base)
        last = max((b for _, b in spans), default=first - 1)
        ends = np.asarray(self._ends[first - self._base : last + 1 - self._base], dtype=float)
        from servecal.sched.result import REQUEST_COLUMNS

        rows: dict[str, list[Any]] = {c: [] for c in REQUEST_COLUMNS}
        _append_request(rows, t, ends, first)
        row = {c: values[0] for c, values in rows.items()}
        row["request_id"] = t.request_id
        row["cached_tokens"] = t.cached_tokens
        return row

    @property
    def steps(self) -> int:
        return self._base + len(self._ends)

    # -- writing ------------------------------------------------------------------------
    def _writer_loop(self) -> None:
        while True:
            self._wake.wait(self._flush_s)
            self._wake.clear()
            if self._stop:
                return
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - a failed write must not take the server down
                log.exception("servecal: could not append to the run folder %s", self.folder)

    def flush(self) -> None:
        """Append what was logged since the last flush (in the caller's thread)."""
        with self._write_lock:
            self._flush_locked(final=False)

    def close(self) -> None:
        """Write everything, running requests included, mark ``run.json`` closed, and
        stop the writer thread."""
        if self._closed:
            return
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=60)
        with self._write_lock:
            self._flush_locked(final=True)
            for tail in (self._step_tail, self._request_tail):
                # everything is in parts, unless a part could not be written: then
                # the tails still hold what it would have
                tail.close(remove=not self._part_failed)
            self._write_meta(closed=True)
            self._closed = True

    def _flush_locked(self, final: bool) -> None:
        with self._lock:
            rows, self._rows = self._rows, []
            joules = self._energy.drain() if self._energy is not None else None
            done, self._done = self._done, []
            # the tails from here on hold what comes after these rows
            old_tails = [t.rotate() for t, new in ((self._step_tail, rows),
                                                   (self._request_tail, done)) if new]  # fmt: skip
            base = self._base
            n_total = base + len(self._ends)
            open_tracks = list(self._tracks.values())
            starts = [t.streaks[0][0] for t in open_tracks if t.streaks]
            if final:  # running requests get a row too, their open streak ending now
                done += [self._request_row(t.frozen(n_total - 1)) for t in open_tracks]
        if final:
            self._write_empty_tables(not rows, not done, n_total)
        if not rows and not done:
            return
        try:
            if rows:
                self._append_steps(rows, n_total - len(rows), joules)
            if done:
                self._append_requests(done)
        except Exception:
            self._lost_steps += len(rows)  # from the parts: the old tails still hold them
            self._part_failed = True
            raise
        for path in old_tails:  # their rows are in parts now
            path.unlink(missing_ok=True)
        self._report_tail_errors()
        self.flushes += 1
        self._trim_ends(min([*starts, n_total]), base)

    def _write_empty_tables(self, no_steps: bool, no_requests: bool, n_total: int) -> None:
        """A closed log has both tables, even when one stayed empty."""
        from servecal.costmodels.segments import parts

        if no_steps and not parts(self.folder / "iterations.parquet"):
            self._append_steps([], n_total, [] if self._energy is not None else None)
        if no_requests and not parts(self.folder / "requests.parquet"):
            self._append_requests([])

    def _trim_ends(self, oldest: int, base: int) -> None:
        """Drop the step end times no running request can still need (before ``oldest``)."""
        if oldest - base >= _TRIM_AT:
            with self._lock:
                cut = oldest - self._base
                self._ends = self._ends[cut:]
                self._base += cut

    def _report_tail_errors(self) -> None:
        """One warning per tail that stopped writing (the parts still come)."""
        for tail in (self._step_tail, self._request_tail):
            if tail.error is not None and tail not in self._tails_reported:
                self._tails_reported.append(tail)
                log.warning(
                    "servecal: the run folder's tail %s stopped (%s): a hard stop now "
                    "loses up to one flush interval",
                    tail.path,
                    tail.error,
                )

    def _next_part(self, kind: str) -> Path:
        return self.folder / kind / f"part-{self._parts:06d}.parquet"

    def _append_steps(
        self, rows: list[Sequence[float]], first: int, joules: list[float] | None
    ) -> None:
        from servecal.sched.engine import ITERATION_COLUMNS
        from servecal.util.arrow_numpy import write_parquet

        steps = np.array(rows, dtype=float).reshape(-1, len(STEP_FIELDS))
        cols: dict[str, Any] = {name: steps[:, k] for k, name in enumerate(STEP_FIELDS)}
        for name in _INT_FIELDS:
            cols[name] = cols[name].astype(np.int64)
        args = tuple(cols[c] for c in ("n_decode", "chunk", "ctx", "prefix"))
        cols["pred_p50_ms"], cols["pred_p99_ms"], cols["margin_ms"] = self._predictions(
            len(steps), args
        )
        cols["energy_j"] = (
            np.asarray(joules, dtype=float) if joules is not None else np.full(len(steps), np.nan)
        )
        cols["step"] = np.arange(first, first + len(steps), dtype=np.int64)
        extra = [f for f in (*STEP_FIELDS, "step") if f not in ITERATION_COLUMNS]
        ordered = {name: cols[name] for name in (*ITERATION_COLUMNS, *extra)}
        with atomic_path(self._next_part("iterations.parquet")) as tmp:
            write_parquet(ordered, tmp)
        self._parts += 1

    def _append_requests(self, done: list[dict[str, Any]]) -> None:
        from servecal.sched.result import REQUEST_COLUMNS, request_columns
        from servecal.util.arrow_numpy import write_parquet

        cols = request_columns({c: [row[c] for row in done] for c in REQUEST_COLUMNS})
        cols["request_id"] = np.array([row["request_id"] for row in done], dtype=object)
        cols["cached_tokens"] = np.array([row["cached_tokens"] for row in done], dtype=np.int64)
        with atomic_path(self._next_part("requests.parquet")) as tmp:
            write_parquet(cols, tmp)
        self._parts += 1

    def _write_meta(self, closed: bool) -> None:
        from servecal.sched.result import beyond_grid_counts, beyond_grid_line
        from servecal.sched.runfolder import write_json

        beyond = beyond_grid_counts(self._predictor)  # the serving loop's own queries
        if closed and beyond_grid_line(beyond):
            log.warning("servecal: %s", beyond_grid_line(beyond))
        doc = {
            "schema": "servecal.run/1",
            "config": self._config,
            "seeds": {},
            "summary": {},  # computed by readers from the parts
            "energy_source": self._energy_source,
            "beyond_grid": beyond,
            "log": {
                "format": LOG_FORMAT,
                "flush_every": self._flush_every,
                "flush_s": self._flush_s,
                "closed": closed,
                "steps": self.steps,
                "lost_steps": self._lost_steps,
                "written_unix": time.time(),
            },
        }
        write_json(self.folder / "run.json", doc)

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
