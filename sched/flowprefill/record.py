"""What the operator-level driver records, and the run it turns into.

The frames follow the engine's schemas (docs/engine.md) so that the one metrics
implementation (:func:`servecal.sched.metrics.summarize`) and the run-folder
writer take them unchanged. An *iteration* row here is a segment: a prefill batch
running a contiguous range of its operators (``ops_from``..``ops_to``, ``parked``
when it stopped at a boundary), or a colocated decode iteration (``chunk = 0``).

Beyond the engine's counters it keeps FlowPrefill's own (``RunResult.counters``):
scheduler wake-ups and their decision time, every park's *blocking time*
(decided → running batch parked) and the longest single operator run.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from servecal.costmodels.predictor import TAIL_QUANTILE, Predictor
from servecal.sched.engine import ITERATION_COLUMNS
from servecal.sched.executor import Executor
from servecal.sched.flowprefill.state import Job
from servecal.sched.request import Request
from servecal.sched.result import (
    REQUEST_COLUMNS,
    RunResult,
    append_request_row,
    p99,
    request_columns,
)

if TYPE_CHECKING:
    from servecal.sched.flowprefill.driver import _Segment


class Recorder:
    """Collects rows and counters while the driver runs."""

    def __init__(self, requests: list[Request], executor: Executor) -> None:
        self._requests = requests
        self._energy_source = getattr(executor, "energy_source", "none")
        self._cols: dict[str, list[Any]] = {c: [] for c in ITERATION_COLUMNS}
        self._cols.update(ops_from=[], ops_to=[], parked=[], rids=[])
        self._first: dict[int, float] = {}
        self._done: dict[int, float] = {}
        self._parks_of: dict[int, int] = {}
        self._rejected: set[int] = set()
        self._decode_ends: list[float] = []
        self._decode_from: dict[int, int] = {}  # rid -> first decode iteration index
        self._blocking: list[float] = []
        self._max_op = 0.0
        self.wakeups = 0
        self.decision_us = 0.0
        self.last_decision_us = math.nan
        self.admitted = 0
        self._end = math.nan

    # -- events ----------------------------------------------------------------------------
    def wake(self, us: float) -> None:
        self.wakeups += 1
        self.decision_us += us
        self.last_decision_us = us

    def operators(self, durations: np.ndarray) -> None:
        if durations.size:
            self._max_op = max(self._max_op, float(durations.max()))

    def park(self, blocking_ms: float, n_jobs: int) -> None:
        self._blocking.append(blocking_ms)

    def first_token(self, job: Job, now: float) -> None:
        self._first[job.rid] = now
        self._parks_of[job.rid] = job.parks
        self._decode_from[job.rid] = len(self._decode_ends)

    def finish(self, rid: int, now: float) -> None:
        self._done[rid] = now

    def reject(self, rid: int) -> None:
        self._rejected.add(rid)

    @property
    def decode_count(self) -> int:
        return len(self._decode_ends)

    def _row(self, **values: Any) -> None:
        for key, col in self._cols.items():
            col.append(values.get(key, math.nan))

    def segment(self, seg: _Segment, share: float, parked: bool, p: Predictor) -> None:
        total = int(sum(seg.tokens))
        self._row(
            start_ms=seg.start_ms,
            duration_ms=seg.run_ms,
            n_decode=0,
            chunk=total,
            n_prefills=len(seg.jobs),
            ctx=0.0,
            prefix=seg.prefix,
            pred_p50_ms=float(p.predict(0, total, 0, seg.prefix, q=0.5)) * share,
            pred_p99_ms=float(p.predict(0, total, 0, seg.prefix, q=TAIL_QUANTILE)) * share,
            margin_ms=float(p.margin(0, total, 0, seg.prefix)) * share,
            energy_j=math.nan if seg.energy is None else seg.energy * share,
            decision_us=seg.decision_us,
            ops_from=seg.first_op,
            ops_to=seg.first_op + seg.i,
            parked=parked,
            rids=" ".join(str(j.rid) for j in seg.jobs),
        )

    def decode(
        self, start: float, duration: float, energy: float | None, n: int, ctx: float,
        p: Predictor,
    ) -> int:  # fmt: skip
        """Log one decode iteration; return its index among decode iterations."""
        self._decode_ends.append(start + duration)
        self._row(
            start_ms=start,
            duration_ms=duration,
            n_decode=n,
            chunk=0,
            n_prefills=0,
            ctx=ctx,
            prefix=0.0,
            pred_p50_ms=float(p.predict(n, 0, ctx, 0, q=0.5)),
            pred_p99_ms=float(p.predict(n, 0, ctx, 0, q=TAIL_QUANTILE)),
            margin_ms=float(p.margin(n, 0, ctx, 0)),
            energy_j=math.nan if energy is None else energy,
            decision_us=math.nan,
            ops_from=0,
            ops_to=0,
            parked=False,
            rids="",
        )
        return len(self._decode_ends) - 1

    def close(self, now: float) -> None:
        self._end = now

    # -- the run -----------------------------------------------------------------------------
    def _request_columns(self) -> dict[str, np.ndarray]:
        ends = np.asarray(self._decode_ends, dtype=float)
        rows: dict[str, list[Any]] = {c: [] for c in REQUEST_COLUMNS}
        for req in self._requests:
            first = self._first.get(req.rid, math.nan)
            done = self._done.get(req.rid, math.nan)
            start = self._decode_from.get(req.rid)
            gaps = np.empty(0)
            tokens = 0
            if start is not None:
                stop = start + req.output_tokens - 1 if not math.isnan(done) else ends.size
                times = np.concatenate([[first], ends[start:stop]])
                gaps = np.diff(times)
                tokens = times.size
            append_request_row(
                rows,
                req,
                first_ms=first,
                done_ms=done,
                tokens_out=tokens,
                gaps=gaps,
                recomputes=0,
                parks=self._parks_of.get(req.rid, 0),
                slo_exception=False,
                rejected=req.rid in self._rejected,
            )
        return request_columns(rows)

    @property
    def blocking_ms(self) -> np.ndarray:
        """Every park's blocking time: decided → the running batch parked, ms."""
        return np.asarray(self._blocking, dtype=float)

    def counters(self) -> dict[str, Any]:
        """The driver's own counters (beside the engine's): ``wakeups``,
        ``decision_us_total``, ``parked_batches``, ``p99_blocking_ms``,
        ``max_blocking_ms`` and ``max_operator_ms``."""
        b = self.blocking_ms
        return {
            "wakeups": self.wakeups,
            "decision_us_total": self.decision_us,
            "parked_batches": int(b.size),
            "p99_blocking_ms": p99(b) if b.size else None,
            "max_blocking_ms": float(b.max()) if b.size else None,
            "max_operator_ms": self._max_op,
        }

    def result(self) -> RunResult:
        ints = ("n_decode", "chunk", "n_prefills", "ops_from", "ops_to")
        iterations: dict[str, np.ndarray] = {}
        for key, values in self._cols.items():
            if key in ints:
                iterations[key] = np.asarray(values, dtype=np.int64)
            elif key == "parked":
                iterations[key] = np.asarray(values, dtype=bool)
            elif key == "rids":
                iterations[key] = np.asarray([str(v) for v in values], dtype=object)
            else:
                iterations[key] = np.asarray(values, dtype=float)
        return RunResult(
            request_columns=self._request_columns(),
            iteration_columns=iterations,
            plan_calls=self.wakeups,
            energy_source=self._energy_source,
            counters=self.counters(),
        )
