"""The iteration-level reference engine (DESIGN.md §Engine).

Each :meth:`Engine.step`: admit arrivals; if the ready requests' decodes no longer
fit in KV, preempt by recompute the most recently admitted running request
(vLLM's rule) until they do; ask the policy for a :class:`Plan` from a read-only
view; validate it; run it on the executor; advance the clock by the actual
duration and apply its effects (prefill progress, tokens, completions).

A request's prefill emits its first output token; every later decode emits one.
Its KV is its prefilled tokens plus the decodes run since. A preempted request
is re-queued at the front with its KV gone and re-prefills prompt + the tokens it
already produced (which stay delivered).

The hot loop avoids per-request work: ready requests that decode in every
iteration are advanced implicitly (see :mod:`servecal.sched.live`), completions
are keyed by iteration index, and iteration rows go into plain lists; frames are
built once by :meth:`Engine.result`.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from heapq import heapify, heappush
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

from servecal.costmodels.errors import InputError
from servecal.costmodels.predictor import PLAN_QUANTILE, Predictor
from servecal.sched.executor import Executor
from servecal.sched.live import Clock, LiveRequest, Phase
from servecal.sched.observe import IterationRecord, Observer
from servecal.sched.plan import DECODE_ONLY, Plan, PlanError
from servecal.sched.policy import Policy
from servecal.sched.request import Request
from servecal.sched.validate import check_plan
from servecal.sched.view import EngineView

if TYPE_CHECKING:
    from servecal.sched.result import RunResult


@dataclass(frozen=True)
class EngineConfig:
    """``kv_capacity``: ``M`` in tokens (default ≈ an 8B model's KV on an 80 GB GPU at
    128 KiB/token). ``horizon_ms``: stop the run then (``None``: when all are done)."""

    kv_capacity: int = 500_000
    horizon_ms: float | None = None

    def __post_init__(self) -> None:
        if self.kv_capacity < 1:
            raise ValueError("EngineConfig.kv_capacity must be >= 1")
        if self.horizon_ms is not None and not self.horizon_ms > 0:
            raise ValueError("EngineConfig.horizon_ms must be > 0")


#: Per-iteration fields the hot loop records, in tuple order.
ROW_COLUMNS = (
    "start_ms",
    "duration_ms",
    "n_decode",
    "chunk",
    "n_prefills",
    "ctx",
    "prefix",
    "energy_j",
    "decision_us",
    "budget_ms",
)

#: Iteration columns of the frame, in order (observers may add more).
ITERATION_COLUMNS = (
    "start_ms",
    "duration_ms",
    "n_decode",
    "chunk",
    "n_prefills",
    "ctx",
    "prefix",
    "pred_p50_ms",
    "pred_p99_ms",
    "margin_ms",
    "energy_j",
    "decision_us",
    "budget_ms",
)


def _answer(query: Callable[[], Any]) -> float:
    """A logged prediction; NaN when the predictor has none (P50-only table: no P99)."""
    try:
        return float(query())
    except InputError:
        return math.nan


class Engine:
    """One simulated (or real) serving run: ``Engine(...).run()`` → :class:`RunResult`."""

    def __init__(
        self,
        requests: Iterable[Request],
        policy: Policy,
        predictor: Predictor,
        executor: Executor,
        config: EngineConfig | None = None,
        observers: Sequence[Observer] = (),
        policy_name: str | None = None,
    ) -> None:
        self._config = config or EngineConfig()
        self._M = self._config.kv_capacity
        self._horizon = self._config.horizon_ms
        self._policy = policy
        self._plan = policy.plan
        self._name = policy_name or type(policy).__name__
        self._predictor = predictor
        self._executor = executor
        observers = list(observers)
        for hooked in (predictor, policy):
            if callable(getattr(hooked, "observe", None)) and hooked not in observers:
                observers.append(hooked)  # type: ignore[arg-type]
        self._observers = observers
        self._pending = sorted(requests, key=lambda r: (r.arrival_ms, r.rid))
        if len({r.rid for r in self._pending}) != len(self._pending):
            raise ValueError("request ids must be unique")
        self._next = 0
        self._now = self._pending[0].arrival_ms if self._pending else 0.0
        self._clock = Clock()
        self._live: dict[int, LiveRequest] = {}
        self._waiting: OrderedDict[int, LiveRequest] = OrderedDict()
        self._prefilling: dict[int, LiveRequest] = {}
        self._ready: dict[int, LiveRequest] = {}
        self._running: dict[int, LiveRequest] = {}
        self._parked_ready: dict[int, LiveRequest] = {}
        self._finish_at: dict[int, list[LiveRequest]] = {}
        self._sync_heap: list[tuple[float, int, int]] = []  # (D_i, rid, version)
        self._lag_heap: list[tuple[float, int, int]] = []  # (d_i, rid, version)
        self._kv_used = 0
        self._kv_ready = 0  # KV held by ready requests (for ctx)
        self._n_ready = 0
        self._admits = 0
        self._preemptions = 0
        self._plan_calls = 0
        self._ev_arrivals: list[int] = []
        self._ev_prefilled: list[int] = []
        self._ev_finished: list[int] = []
        self._rows: list[tuple[Any, ...]] = []  # one tuple per iteration: ROW_COLUMNS
        self._pred_rows: list[tuple[float, float, float]] = []  # with observers only
        self._extra: dict[str, list[Any]] = {}
        self.view = EngineView(self)

    # -- the loop -------------------------------------------------------------------
    def run(self) -> RunResult:
        """Run until every request is done or rejected (or the horizon); return the run."""
        step = self.step
        while step():
            pass
        return self.result()

    def step(self) -> bool:
        """One scheduling step (usually one iteration); False when the run is over."""
        nxt = self._next
        if nxt < len(self._pending) and self._pending[nxt].arrival_ms <= self._now:
            self._admit_arrivals()
        if not self._running and not self._waiting:
            if self._next >= len(self._pending):
                return False
            self._now = max(self._now, self._pending[self._next].arrival_ms)
            self._admit_arrivals()
        if self._horizon is not None and self._now >= self._horizon:
            return False
        while self._kv_used + self._n_ready > self._M and self._running:
            self._preempt(next(reversed(self._running.values())))
        t0 = perf_counter_ns()
        plan = self._plan(self.view, self._predictor)
        decision_us = (perf_counter_ns() - t0) / 1000.0
        self._plan_calls += 1
        if self._ev_arrivals:
            self._ev_arrivals.clear()
        if self._ev_prefilled:
            self._ev_prefilled.clear()
        if self._ev_finished:
            self._ev_finished.clear()
        return self._run_plan(plan, decision_us)

    def _admit_arrivals(self) -> None:
        pending, now = self._pending, self._now
        while self._next < len(pending) and pending[self._next].arrival_ms <= now:
            req = pending[self._next]
            self._next += 1
            live = LiveRequest(req, self._clock)
            self._live[req.rid] = live
            if req.prompt_tokens + req.output_tokens - 1 > self._M:
                live._phase = Phase.REJECTED  # can never fit, whatever the policy does
                continue
            self._waiting[req.rid] = live
            self._ev_arrivals.append(req.rid)

    # -- plan validation and execution -----------------------------------------------
    def _fail(self, what: str) -> PlanError:
        return PlanError(f"policy {self._name!r} at {self._now:.3f} ms: {what}")

    def _run_plan(self, plan: Plan, decision_us: float) -> bool:
        starting: list[LiveRequest] = []
        if plan is DECODE_ONLY and not self._parked_ready:
            # fast path: step() already made room for every decode
            n_decode, chunks = self._n_ready, []
        else:
            n_decode, chunks = check_plan(self, plan)
            if plan.preempt or plan.park or plan.reject or plan.exceptions:
                self._apply_side_orders(plan)
        if plan.decode is not None or self._parked_ready:
            ctx, starting = self._set_decoders(plan)  # slow path: some ready ones skip
        else:
            ctx = self._kv_ready / self._n_ready if self._n_ready else 0.0
        chunk = 0
        prefix_weighted = 0
        for live, tokens in chunks:
            if live._phase == Phase.WAITING:
                self._admit(live)
            elif live._parked:
                live._parked = False
            chunk += tokens
            prefix_weighted += live._prefilled * tokens
        if n_decode == 0 and chunk == 0:
            return self._idle()
        prefix = prefix_weighted / chunk if chunk else 0.0
        start = self._now
        duration, energy = self._executor.execute(n_decode, chunk, ctx, prefix, start)
        if not duration > 0:
            raise RuntimeError(f"executor returned a non-positive duration {duration!r}")
        now = self._now = start + duration
        clock = self._clock
        idx = len(clock.ends)
        clock.ends.append(now)
        clock.last_iter = idx
        self._rows.append(
            (start, duration, n_decode, chunk, len(chunks), ctx, prefix,
             math.nan if energy is None else energy, decision_us, plan.budget_ms)
        )  # fmt: skip
        if self._observers:
            self._observe(idx, start, n_decode, chunk, ctx, prefix, duration, energy)
        self._kv_used += n_decode + chunk
        self._kv_ready += n_decode
        for live in starting:
            self._start_streak(live, idx, live._tok + 1)
        for live, tokens in chunks:
            live._prefilled += tokens
            if live._prefilled == live._target:
                self._prefill_done(live, idx, now)
        done = self._finish_at.pop(idx, None)
        if done:
            for live in done:
                if live._streaking and live._sync_iter + live.output_tokens - live._tok == idx:
                    self._finish(live, now)
        return True

    def _idle(self) -> bool:
        """The plan runs nothing: wait for the next arrival, or break a memory deadlock."""
        if not self._running and not self._waiting:  # e.g. the last arrivals were refused
            return True
        if self._next < len(self._pending):
            self._now = max(self._now, self._pending[self._next].arrival_ms)
            return True
        if self._running:  # nothing will arrive: free memory the vLLM way
            self._preempt(next(reversed(self._running.values())))
            return True
        raise self._fail(f"plans nothing while {len(self._waiting)} requests wait")

    def _apply_side_orders(self, plan: Plan) -> None:
        for rid in plan.reject:
            live = self._waiting.pop(rid)
            live._phase = Phase.REJECTED
        for rid in plan.preempt:
            self._preempt(self._running[rid])
        for rid in plan.park:
            live = self._running.get(rid)
            if live is not None:
                live._parked = True
                if live._phase == Phase.READY:
                    self._parked_ready[rid] = live
        for rid in plan.exceptions:
            self._live[rid]._exception = True

    def _set_decoders(self, plan: Plan) -> tuple[float, list[LiveRequest]]:
        """Slow path: only some ready requests decode. Returns (ctx, streaks to start)."""
        if plan.decode is None:
            chosen = {rid for rid in self._ready if rid not in self._parked_ready}
        else:
            chosen = set(plan.decode)
        kv = 0
        starting = []
        last_ms = self._clock.ends[-1] if self._clock.ends else math.nan
        for rid, live in self._ready.items():
            if rid in chosen:
                kv += live.kv_tokens
                if live._parked:
                    live._parked = False
                    self._parked_ready.pop(rid, None)
                if not live._streaking:
                    starting.append(live)
            elif live._streaking:  # it stops decoding: freeze its count and ℓ_i
                live._streaks.append((live._sync_iter, self._clock.last_iter))
                live._tok = live.tokens_out
                live._streaking = False
                live._last_ms = last_ms
                live._hv += 1
                heappush(self._lag_heap, (last_ms + live.tpot_slo_ms, rid, live._hv))
        return (kv / len(chosen) if chosen else 0.0), starting

    # -- state transitions ----------------------------------------------------------
    def _admit(self, live: LiveRequest) -> None:
        del self._waiting[live.rid]
        live._phase = Phase.PREFILL
        live._admit_seq = self._admits
        self._admits += 1
        self._prefilling[live.rid] = live
        self._running[live.rid] = live

    def _start_streak(self, live: LiveRequest, idx: int, tokens: int) -> None:
        """``live`` emits its ``tokens``-th token in iteration ``idx`` and decodes on."""
        live._streaking = True
        live._sync_iter = idx
        live._tok = tokens
        live._hv += 1
        heappush(self._sync_heap, (live.tpot_slo_ms, live.rid, live._hv))
        if len(self._sync_heap) > 4 * self._n_ready + 64:
            self._compact_heaps()
        if tokens >= live.output_tokens:
            self._finish(live, self._now)
        else:
            self._finish_at.setdefault(idx + live.output_tokens - tokens, []).append(live)

    def _prefill_done(self, live: LiveRequest, idx: int, now: float) -> None:
        del self._prefilling[live.rid]
        live._phase = Phase.READY
        self._ready[live.rid] = live
        self._n_ready += 1
        self._kv_ready += live._prefilled
        live._kv0 = live._prefilled - (live._tok + 1)
        if math.isnan(live._first_ms):
            live._first_ms = now
        self._ev_prefilled.append(live.rid)
        self._start_streak(live, idx, live._tok + 1)

    def _leave_ready(self, live: LiveRequest) -> int:
        """Take a ready request out of the decode set; return the KV it held."""
        kv = live.kv_tokens
        if live._streaking:
            live._streaks.append((live._sync_iter, self._clock.last_iter))
            live._tok = live.tokens_out
            live._last_ms = self._clock.ends[-1]
            live._streaking = False
        self._kv_ready -= kv
        self._n_ready -= 1
        del self._ready[live.rid]
        self._parked_ready.pop(live.rid, None)
        return kv

    def _finish(self, live: LiveRequest, now: float) -> None:
        kv = self._leave_ready(live)
        self._kv_used -= kv
        del self._running[live.rid]
        live._phase = Phase.DONE
        live._done_ms = now
        live._hv += 1
        self._ev_finished.append(live.rid)

    def _preempt(self, live: LiveRequest) -> None:
        """Recompute preemption: free the KV, lose the progress, re-queue at the front."""
        if live._phase == Phase.READY:
            self._kv_used -= self._leave_ready(live)
        else:
            self._kv_used -= live._prefilled
            del self._prefilling[live.rid]
        del self._running[live.rid]
        live._phase = Phase.WAITING
        live._target = live.request.prompt_tokens + live._tok
        live._prefilled = 0
        live._parked = False
        live._hv += 1
        live._preemptions += 1
        self._preemptions += 1
        self._waiting[live.rid] = live
        self._waiting.move_to_end(live.rid, last=False)

    def _compact_heaps(self) -> None:
        ready = self._ready
        self._sync_heap[:] = [
            e for e in self._sync_heap if (x := ready.get(e[1])) is not None and x._hv == e[2]
        ]
        heapify(self._sync_heap)
        self._lag_heap[:] = [
            e for e in self._lag_heap if (x := ready.get(e[1])) is not None and x._hv == e[2]
        ]
        heapify(self._lag_heap)

    # -- online validation ------------------------------------------------------------
    def _observe(
        self,
        idx: int,
        start: float,
        n: int,
        c: int,
        ctx: float,
        prefix: float,
        actual: float,
        energy: float | None,
    ) -> None:
        p = self._predictor
        record = IterationRecord(
            idx,
            start,
            n,
            c,
            ctx,
            prefix,
            _answer(lambda: p.predict(n, c, ctx, prefix, q=0.5)),
            _answer(lambda: p.predict(n, c, ctx, prefix, q=PLAN_QUANTILE)),
            _answer(lambda: p.margin(n, c, ctx, prefix)),
            actual,
            energy,
        )
        self._pred_rows.append((record.pred_p50, record.pred_p99, record.margin))
        for obs in self._observers:
            extra = obs.observe(record)
            if extra:
                for key, value in extra.items():
                    col = self._extra.setdefault(key, [None] * idx)
                    col.extend([None] * (idx - len(col)))
                    col.append(value)

    # -- results --------------------------------------------------------------------
    @property
    def preemptions(self) -> int:
        return self._preemptions

    @property
    def plan_calls(self) -> int:
        return self._plan_calls

    def result(self) -> RunResult:
        """Build the run's frames (once, at the end)."""
        from servecal.sched.result import build_result

        return build_result(self)
