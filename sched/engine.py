"""The iteration-level reference engine (docs/engine.md).

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

All state the view, the plan checks and the result builder read is in one
:class:`~servecal.sched.state.EngineState` the engine alone writes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from heapq import heapify, heappop, heappush
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

from servecal.costmodels.predictor import TAIL_QUANTILE, Predictor
from servecal.sched.executor import Executor
from servecal.sched.live import LiveRequest, Phase
from servecal.sched.observe import IterationRecord, Observer
from servecal.sched.plan import DECODE_ONLY, Plan, PlanError
from servecal.sched.plan_check import check_plan
from servecal.sched.policy import Policy
from servecal.sched.prefix_cache import PrefixCache, PrefixCacheConfig, cacheable_blocks, chain_keys
from servecal.sched.request import Request
from servecal.sched.state import EngineState
from servecal.sched.view import EngineView
from servecal.util.errors import InputError

if TYPE_CHECKING:
    from servecal.profiler.kvbudget import KVBudget
    from servecal.sched.iteration_stream import IterationStream
    from servecal.sched.result import RunResult
    from servecal.sched.speculative import SpeculativeConfig


@dataclass(frozen=True)
class EngineConfig:
    """``kv_capacity``: ``M`` in tokens (default ≈ an 8B model's KV on an 80 GB GPU at
    128 KiB/token). ``horizon_ms``: stop the run then (``None``: when all are done).
    ``prefix_cache``: a KV block cache of prompt prefixes (docs/prefix_cache.md) for
    requests that carry ``block_ids``; ``None``: every prompt is prefilled whole.
    ``speculative``: decode with ``k`` draft tokens verified per step
    (:mod:`servecal.sched.speculative`; ``None``: one token per decode per step).
    The two are not modelled together (refused). ``stream_iterations_to``: write the
    iteration rows to this Parquet file in batches as the run goes
    (:mod:`servecal.sched.iteration_stream`) instead of keeping them (refused with
    observers, which add columns, and with speculative decoding)."""

    kv_capacity: int = 500_000
    horizon_ms: float | None = None
    prefix_cache: PrefixCacheConfig | None = None
    speculative: SpeculativeConfig | None = None
    stream_iterations_to: str | None = None

    def __post_init__(self) -> None:
        if self.kv_capacity < 1:
            raise ValueError("EngineConfig.kv_capacity must be >= 1")
        if self.horizon_ms is not None and not self.horizon_ms > 0:
            raise ValueError("EngineConfig.horizon_ms must be > 0")
        if self.prefix_cache is not None and self.speculative is not None:
            raise ValueError(
                "speculative decoding with the prefix cache is not modelled yet: "
                "pass --prefix-cache off with --speculative"
            )
        if self.stream_iterations_to is not None and self.speculative is not None:
            raise ValueError("--stream-iterations with --speculative is not supported yet")

    @classmethod
    def from_budget(cls, budget: KVBudget, **options: Any) -> EngineConfig:
        """An engine whose ``M`` is ``budget``'s tokens (memory over the bytes a token of
        its KV dtype takes): Sorted-F's cap and the prefix cache's room follow it."""
        return cls(kv_capacity=budget.tokens, **options)


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

#: Iteration columns of the frame, in order (observers may add more): the recorded
#: fields with the logged predictions after ``prefix``.
ITERATION_COLUMNS = (*ROW_COLUMNS[:7], "pred_p50_ms", "pred_p99_ms", "margin_ms", *ROW_COLUMNS[7:])


def block_keys(requests: list[Request], config: PrefixCacheConfig) -> dict[int, tuple[int, ...]]:
    """Chained keys of each request's full prompt blocks (requests with identity only)."""
    keys = {}
    for req in requests:
        if not req.block_ids:
            continue
        if req.block_size != config.block_size:
            raise InputError(
                f"request {req.rid}: block size {req.block_size} != the prefix cache's "
                f"{config.block_size}"
            )
        full = min(len(req.block_ids), req.prompt_tokens // config.block_size)
        if full:
            keys[req.rid] = chain_keys(req.block_ids, full)
    return keys


def _prune_top(heap: list[tuple[float, int, int]], ready: dict[int, LiveRequest]) -> None:
    """Pop entries from ``heap``'s top until it names a ready request at its version."""
    while heap:
        top = heap[0]
        live = ready.get(top[1])
        if live is not None and live.heap_version == top[2]:
            return
        heappop(heap)


def _answer(query: Callable[[], Any]) -> float:
    """A logged prediction; NaN when the predictor has none (P50-only table: no P99)."""
    try:
        return float(query())
    except InputError:
        return math.nan


class IterationLog:
    """What the engine recorded per iteration, for :mod:`servecal.sched.result`.

    ``rows``: one tuple per iteration (``ROW_COLUMNS``) — with a ``stream``
    (:class:`~servecal.sched.iteration_stream.IterationStream`), only those not yet
    written to its file; ``predictions``: ``(P50, P99, margin)`` per iteration when
    observers asked for them during the run (else empty: they are computed in one
    vectorised call at the end); ``extra``: columns observers added."""

    __slots__ = ("rows", "predictions", "extra", "stream")

    def __init__(self, stream: IterationStream | None = None) -> None:
        self.stream = stream
        self.rows: list[tuple[Any, ...]] = [] if stream is None else stream.rows
        self.predictions: list[tuple[float, float, float]] = []
        self.extra: dict[str, list[Any]] = {}

    def __len__(self) -> int:
        """Iterations recorded so far (written and held)."""
        return len(self.rows) + (0 if self.stream is None else self.stream.count)


class Engine:
    """One simulated (or real) serving run: ``Engine(...).run()`` → :class:`RunResult`.

    Public, read-only during a run: ``state`` (:class:`EngineState`), ``view`` (what
    the policy reads), ``log`` (:class:`IterationLog`), ``predictor``, ``executor``,
    ``observers``, ``policy_name``.
    """

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
        self._horizon = self._config.horizon_ms
        self._plan = policy.plan
        self.policy_name = policy_name or type(policy).__name__
        self._spec = self._config.speculative
        observing = predictor  # hooked unwrapped: an observer passed in is fed once
        if self._spec is not None:  # a decode verifies k + 1 tokens: priced so
            from servecal.sched import speculative

            draft = speculative.load_draft(self._spec)
            predictor = speculative.SpeculativePredictor(predictor, self._spec, draft)
            executor = speculative.SpeculativeExecutor(executor, self._spec, draft)
        self.predictor = predictor
        self.executor = executor
        observers = list(observers)
        for hooked in (observing, policy):
            if callable(getattr(hooked, "observe", None)) and hooked not in observers:
                observers.append(hooked)  # type: ignore[arg-type]
        self.observers: tuple[Observer, ...] = tuple(observers)
        pending = sorted(requests, key=lambda r: (r.arrival_ms, r.rid))
        if len({r.rid for r in pending}) != len(pending):
            raise ValueError("request ids must be unique")
        self.state = EngineState(pending, self._config.kv_capacity)
        self.log = IterationLog(self._stream(predictor))
        # the hot loop's one append per iteration (streamed: flushed when a batch is full)
        self._record = self.log.rows.append if self.log.stream is None else self.log.stream.record
        self._fail = self.fail  # bound once: handed to the plan checks every iteration
        self.view = EngineView(self.state)
        self._next = 0  # index of the next arrival in state.requests
        self._finish_at: dict[int, list[LiveRequest]] = {}  # iteration -> completions
        self._stale = False  # a deadline heap may have a stale entry on top
        self._admits = 0
        cache_config = self._config.prefix_cache
        self.prefix_cache = None if cache_config is None else PrefixCache(cache_config)
        self._keys = {} if cache_config is None else block_keys(pending, cache_config)

    def _stream(self, predictor: Predictor) -> IterationStream | None:
        path = self._config.stream_iterations_to
        if path is None:
            return None
        if self.observers:  # they add columns whose type only the whole run tells
            names = ", ".join(type(o).__name__ for o in self.observers)
            raise InputError(
                f"--stream-iterations: {names} observe(s) the iterations and add columns; "
                "run without --stream-iterations"
            )
        from servecal.sched.iteration_stream import IterationStream

        return IterationStream(path, predictor)

    # -- the loop -------------------------------------------------------------------
    def run(self) -> RunResult:
        """Run until every request is done or rejected (or the horizon); return the run."""
        step = self.step
        try:
            while step():
                pass
            return self.result()
        except BaseException:
            if self.log.stream is not None:  # no file that reads as a finished run
                self.log.stream.abort()
            raise

    def step(self) -> bool:
        """One scheduling step (usually one iteration); False when the run is over."""
        s = self.state
        pending = s.requests
        if self._next < len(pending) and pending[self._next].arrival_ms <= s.now_ms:
            self._admit_arrivals()
        if not s.running and not s.waiting:
            if self._next >= len(pending):
                return False
            s.now_ms = max(s.now_ms, pending[self._next].arrival_ms)
            self._admit_arrivals()
        if self._horizon is not None and s.now_ms >= self._horizon:
            return False
        while s.kv_used + s.n_ready > s.kv_capacity and s.running:
            self._preempt(next(reversed(s.running.values())))
        if self._stale:
            self._prune_deadlines()
        t0 = perf_counter_ns()
        plan = self._plan(self.view, self.predictor)
        decision_us = (perf_counter_ns() - t0) / 1000.0
        s.plan_calls += 1
        if s.arrived:
            s.arrived.clear()
        if s.prefilled:
            s.prefilled.clear()
        if s.finished:
            s.finished.clear()
        busy = self._run_plan(plan, decision_us)
        if self._stale:
            self._prune_deadlines()
        return busy

    def _admit_arrivals(self) -> None:
        s = self.state
        pending, now, limit = s.requests, s.now_ms, s.kv_capacity
        while self._next < len(pending) and pending[self._next].arrival_ms <= now:
            req = pending[self._next]
            self._next += 1
            live = self._live(req)
            s.live[req.rid] = live
            if req.prompt_tokens + req.output_tokens - 1 > limit:
                live.reject()  # can never fit, whatever the policy does
                continue
            s.waiting[req.rid] = live
            s.arrived.append(req.rid)
            if self._keys and req.rid in self._keys:
                self._lookup(live)

    def _live(self, req: Request) -> LiveRequest:
        if self._spec is None:
            return LiveRequest(req, self.state.clock)
        from servecal.sched.speculative import SpeculativeRequest

        return SpeculativeRequest(req, self.state.clock, self._spec)

    # -- plan execution ---------------------------------------------------------------
    def fail(self, what: str) -> PlanError:
        """A :class:`PlanError` naming the policy and the time (raised by the plan checks)."""
        return PlanError(f"policy {self.policy_name!r} at {self.state.now_ms:.3f} ms: {what}")

    def _run_plan(self, plan: Plan, decision_us: float) -> bool:
        # One function: this runs once per simulated iteration (the engine aims at
        # >= 50,000/s) and reads in order: check the plan, price the batch, run it,
        # account tokens, KV and finishes; a call per stage would be paid every iteration.
        s = self.state
        starting: list[LiveRequest] = []
        if plan is DECODE_ONLY and not s.parked_ready:
            # fast path: step() already made room for every decode
            n_decode, chunks = s.n_ready, []
        else:
            n_decode, chunks = check_plan(s, plan, self._fail)
            if plan.preempt or plan.park or plan.reject or plan.exceptions:
                self._apply_side_orders(plan)
        if plan.decode is not None or s.parked_ready:
            ctx, starting = self._set_decoders(plan)  # slow path: some ready ones skip
        else:
            ctx = s.kv_ready / s.n_ready if s.n_ready else 0.0
        chunk = 0
        prefix_weighted = 0
        for live, tokens in chunks:
            if live.phase == Phase.WAITING:
                self._admit(live)
            elif live.parked:
                live.unpark()
            chunk += tokens
            prefix_weighted += live.prefilled * tokens
        if n_decode == 0 and chunk == 0:
            return self._idle()
        prefix = prefix_weighted / chunk if chunk else 0.0
        before = self._tokens_before(plan, chunks) if self._spec is not None else None
        start = s.now_ms
        duration, energy = self.executor.execute(n_decode, chunk, ctx, prefix, start)
        if not duration > 0:
            raise RuntimeError(f"executor returned a non-positive duration {duration!r}")
        now = s.now_ms = start + duration
        clock = s.clock
        idx = len(clock.ends)
        clock.ends.append(now)
        clock.last_iter = idx
        self._record(
            (start, duration, n_decode, chunk, len(chunks), ctx, prefix,
             math.nan if energy is None else energy, decision_us, plan.budget_ms)
        )  # fmt: skip
        if self.observers:
            self._observe(idx, start, n_decode, chunk, ctx, prefix, duration, energy)
        s.kv_used += n_decode + chunk
        s.kv_ready += n_decode
        s.prefill_tokens += chunk
        cache = self.prefix_cache
        if cache is not None and cache.cached_tokens > s.kv_capacity - s.kv_used:
            cache.fit(s.kv_capacity - s.kv_used)  # the iteration's new KV takes cached room
        for live in starting:
            self._start_streak(live, idx, live.steps_out + 1)
        for live, tokens in chunks:
            if live.add_prefill(tokens):
                self._prefill_done(live, idx, now)
        done = self._finish_at.pop(idx, None)
        if done:
            for live in done:
                if live.finishes_in(idx):
                    self._finish(live, now)
        if before is not None:
            self._speculative_accounting(before)
        return True

    def _tokens_before(
        self, plan: Plan, chunks: list[tuple[LiveRequest, int]]
    ) -> list[tuple[LiveRequest, int]]:
        """Speculative decoding: the requests that may emit tokens this step, with
        their tokens so far (a step delivers a drawn number of tokens per request)."""
        s = self.state
        if plan.decode is None:
            lives = [x for x in s.ready.values() if not x.parked]
        else:
            lives = [s.ready[rid] for rid in plan.decode]
        lives.extend(live for live, _ in chunks)
        return [(live, live.tokens_out) for live in lives]

    def _speculative_accounting(self, before: list[tuple[LiveRequest, int]]) -> None:
        """Speculative decoding: log the tokens delivered and drafts accepted this
        step, and recount the KV from the requests (O(n) a step, this mode only)."""
        s = self.state
        delivered = emitted = 0
        for live, tokens in before:
            got = live.tokens_out - tokens
            delivered += got
            emitted += got > 0
        extra = self.log.extra
        extra.setdefault("tokens_delivered", []).append(delivered)
        extra.setdefault("drafts_accepted", []).append(delivered - emitted)
        s.kv_ready = sum(live.kv_tokens for live in s.ready.values())
        s.kv_used = sum(live.kv_tokens for live in s.running.values())

    def _idle(self) -> bool:
        """The plan runs nothing: wait for the next arrival, or break a memory deadlock."""
        s = self.state
        if not s.running and not s.waiting:  # e.g. the last arrivals were refused
            return True
        if self._next < len(s.requests):
            s.now_ms = max(s.now_ms, s.requests[self._next].arrival_ms)
            return True
        if self.prefix_cache is not None and self._unpin_waiting():
            return True  # waiting requests' cached blocks held the room the queue needs
        if s.running:  # nothing will arrive: free memory the vLLM way
            self._preempt(next(reversed(s.running.values())))
            return True
        raise self.fail(f"plans nothing while {len(s.waiting)} requests wait")

    def _apply_side_orders(self, plan: Plan) -> None:
        s = self.state
        for rid in plan.reject:
            live = s.waiting.pop(rid)
            if live.shared_tokens:
                self._unshare(live)
            live.reject()
        for rid in plan.preempt:
            self._preempt(s.running[rid])
        for rid in plan.park:
            live = s.running.get(rid)
            if live is not None:
                live.park()
                if live.phase == Phase.READY:
                    s.parked_ready[rid] = live
        for rid in plan.exceptions:
            s.live[rid].mark_exception()

    def _set_decoders(self, plan: Plan) -> tuple[float, list[LiveRequest]]:
        """Slow path: only some ready requests decode. Returns (ctx, streaks to start)."""
        s = self.state
        if plan.decode is None:
            chosen = {rid for rid in s.ready if rid not in s.parked_ready}
        else:
            chosen = set(plan.decode)
        kv = 0
        starting = []
        last_ms = s.clock.ends[-1] if s.clock.ends else math.nan
        for rid, live in s.ready.items():
            if rid in chosen:
                kv += live.kv_tokens
                if live.parked:
                    live.unpark()
                    s.parked_ready.pop(rid, None)
                if not live.streaking:
                    starting.append(live)
            elif live.streaking:  # it stops decoding: freeze its count and ℓ_i
                version = live.skip_decode(last_ms)
                heappush(s.lag_heap, (last_ms + live.tpot_slo_ms, rid, version))
                self._stale = True
        return (kv / len(chosen) if chosen else 0.0), starting

    # -- state transitions ----------------------------------------------------------
    def _admit(self, live: LiveRequest) -> None:
        s = self.state
        del s.waiting[live.rid]
        live.admit(self._admits)
        self._admits += 1
        s.prefilling[live.rid] = live
        s.running[live.rid] = live

    def _start_streak(self, live: LiveRequest, idx: int, tokens: int) -> None:
        """``live`` emits its ``tokens``-th token in iteration ``idx`` and decodes on."""
        s = self.state
        version = live.start_streak(idx, tokens)
        self._stale = True
        heappush(s.sync_heap, (live.tpot_slo_ms, live.rid, version))
        if len(s.sync_heap) > 4 * s.n_ready + 64:
            self._compact_heaps()
        if tokens >= live.output_steps:
            self._finish(live, s.now_ms)
        else:
            self._finish_at.setdefault(idx + live.output_steps - tokens, []).append(live)

    def _prefill_done(self, live: LiveRequest, idx: int, now: float) -> None:
        s = self.state
        del s.prefilling[live.rid]
        live.prefill_complete(now)
        s.ready[live.rid] = live
        s.n_ready += 1
        s.kv_ready += live.prefilled
        s.prefilled.append(live.rid)
        if self._keys and live.rid in self._keys:
            self._share_prompt(live)
        self._start_streak(live, idx, live.steps_out + 1)

    def _leave_ready(self, live: LiveRequest) -> int:
        """Take a ready request out of the decode set; return the KV it held."""
        s = self.state
        kv = live.kv_tokens
        live.stop_streak(s.clock.ends[-1])
        s.kv_ready -= kv
        s.n_ready -= 1
        del s.ready[live.rid]
        s.parked_ready.pop(live.rid, None)
        self._stale = True
        return kv

    def _finish(self, live: LiveRequest, now: float) -> None:
        s = self.state
        s.kv_used -= self._leave_ready(live)
        if live.shared_tokens:
            self._unshare(live)
        del s.running[live.rid]
        live.finish(now)
        s.finished.append(live.rid)

    def _preempt(self, live: LiveRequest) -> None:
        """Recompute preemption: free the KV, lose the progress, re-queue at the front."""
        s = self.state
        if live.phase == Phase.READY:
            s.kv_used -= self._leave_ready(live)
        else:
            s.kv_used -= live.prefilled
            del s.prefilling[live.rid]
        if live.shared_tokens:
            self._unshare(live)
        del s.running[live.rid]
        live.recompute()
        s.recomputes += 1
        s.waiting[live.rid] = live
        s.waiting.move_to_end(live.rid, last=False)
        self._stale = True
        if self._keys and live.rid in self._keys:
            self._lookup(live)

    # -- prefix cache (docs/prefix_cache.md) -------------------------------------------
    # KV accounting with a cache: kv_used = each running request's KV outside the cache
    # blocks it references (kv_tokens - shared_tokens) + every referenced block once.
    # Unreferenced blocks sit in the free KV and are evicted when it is needed.
    def _lookup(self, live: LiveRequest) -> None:
        """A waiting request's prefill starts at its longest cached prefix (whole blocks,
        one token always computed); those blocks are referenced (pinned) from now on,
        unless pinning them would leave no room to compute the rest."""
        s, cache = self.state, self.prefix_cache
        assert cache is not None
        keys = self._keys[live.rid]
        block = cache.block_size
        limit = cacheable_blocks(live.prompt_tokens, live.prefill_target, len(keys), block)
        n, unreferenced = cache.match(keys, limit)
        if n == 0:
            return
        rest = live.prefill_target - n * block
        if s.kv_used + unreferenced * block + rest + s.n_ready > s.kv_capacity:
            return  # memory is short: compute it all rather than pin blocks
        s.kv_used += cache.reference(keys[:n]) * block
        live.serve_cached(n * block)
        s.prefix_served += n * block

    def _share_prompt(self, live: LiveRequest) -> None:
        """Its prefill is done: its full prompt blocks join the cache, referenced by it."""
        s, cache = self.state, self.prefix_cache
        assert cache is not None
        keys = self._keys[live.rid]
        block = cache.block_size
        have = live.shared_tokens // block
        if have >= len(keys):
            return
        taken = cache.reference(keys[have:])
        s.kv_used += (taken - (len(keys) - have)) * block  # a duplicate block is held once
        live.share(len(keys) * block)

    def _unshare(self, live: LiveRequest) -> None:
        """It leaves (finished, preempted, rejected): its blocks lose a reference; the
        engine already freed its kv_tokens, of which shared_tokens were the cache's."""
        s, cache = self.state, self.prefix_cache
        assert cache is not None
        shared = live.shared_tokens
        freed = cache.release(self._keys[live.rid][: shared // cache.block_size])
        if live.phase != Phase.WAITING:
            s.kv_used += shared  # the caller subtracted it with kv_tokens
        s.kv_used -= freed * cache.block_size
        live.share(0)
        cache.fit(s.kv_capacity - s.kv_used)

    def _unpin_waiting(self) -> bool:
        """Drop the cached blocks waiting requests pinned; True if any were."""
        pinned = [live for live in self.state.waiting.values() if live.shared_tokens]
        for live in pinned:
            self.state.prefix_served -= live.prefilled  # waiting: its prefilled is the hit
            self._unshare(live)
            live.drop_cached()
        return bool(pinned)

    # -- deadline heaps (read by EngineState.earliest_deadline_ms) --------------------
    def _prune_deadlines(self) -> None:
        """Drop stale entries from the tops of the deadline heaps.

        An entry is stale once its request left the ready set or started or stopped
        a streak (its ``heap_version`` moved on). Pruning here, at the end of the
        engine's own changes, keeps every top valid, so readers only peek."""
        s = self.state
        ready = s.ready
        for heap in (s.sync_heap, s.lag_heap):
            # the top's check written out: most stale steps leave the tops valid, and a
            # call per heap per step costs ~2% of an engine run (benchmarks/engine.py)
            if heap:
                top = heap[0]
                live = ready.get(top[1])
                if live is None or live.heap_version != top[2]:
                    _prune_top(heap, ready)
        self._stale = False

    def _compact_heaps(self) -> None:
        s = self.state
        ready = s.ready
        for heap in (s.sync_heap, s.lag_heap):
            heap[:] = [
                e for e in heap if (x := ready.get(e[1])) is not None and x.heap_version == e[2]
            ]
            heapify(heap)

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
        p = self.predictor
        record = IterationRecord(
            idx,
            start,
            n,
            c,
            ctx,
            prefix,
            _answer(lambda: p.predict(n, c, ctx, prefix, q=0.5)),
            _answer(lambda: p.predict(n, c, ctx, prefix, q=TAIL_QUANTILE)),
            _answer(lambda: p.margin(n, c, ctx, prefix)),
            actual,
            energy,
        )
        self.log.predictions.append((record.pred_p50, record.pred_p99, record.margin))
        extra = self.log.extra
        for obs in self.observers:
            columns = obs.observe(record)
            if columns:
                for key, value in columns.items():
                    col = extra.setdefault(key, [None] * idx)
                    col.extend([None] * (idx - len(col)))
                    col.append(value)

    # -- results --------------------------------------------------------------------
    def result(self) -> RunResult:
        """Build the run's frames (once, at the end)."""
        from servecal.sched.result import build_result

        return build_result(self)
