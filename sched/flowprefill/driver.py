"""The operator-level, event-driven driver: FlowPrefill's engine on one device.

It composes the reference engine's public pieces (requests, truth executors,
predictors, the run frames and metrics) but runs its own loop, because a
preemption here takes effect *inside* an iteration, at an operator boundary,
which the iteration-level :class:`~servecal.sched.engine.Engine` cannot express.

Device time is a sequence of *segments*: a batch of prefill chunks running a
contiguous range of its operators (from a start or a resume to a completion or a
park), and, colocated, decode iterations in between. A batch's duration is drawn
once from the executor when it (re)starts, ``execute(0, tokens, 0, prefix)``,
and split over its remaining operators by :class:`~.operators.OperatorModel`.

Wake-ups (``decide`` calls): event-driven, a preemptive policy is woken by
arrivals, prefill completions, the operator boundary where it asked the running
batch to stop, and (colocated) finished requests that free KV; per-iteration, at
every operator boundary and every decode iteration too. Non-preemptive policies
are woken only when the device is free (the engine's iteration rule).

Settings:

* ``prefill`` (disaggregated, the paper's): only prefills; a request leaves with
  its first token (KV handed to a decode instance, not modelled); TTFT goodput.
* ``colocated``: finished prefills decode on the same device. Decodes and prefill
  operators never share a kernel: at each operator boundary, if the running
  batch's next operator (P99 + margin) plus a decode iteration would end after the
  earliest next-token deadline ``ℓ_i + D_i``, one decode iteration of every
  decoding request runs first; with no prefill to run, decodes run back to back.
  A parked prefill holds its KV and waits like any other; decodes never wait for
  it. Admission reserves a request's prompt + output tokens (its ``max_tokens``) so
  decodes never run out of KV and nothing is ever recomputed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence, ValuesView
from dataclasses import dataclass, field
from time import perf_counter_ns

import numpy as np

from servecal.costmodels.predictor import PLAN_QUANTILE, Predictor
from servecal.sched.executor import Executor
from servecal.sched.flowprefill.decision import Decision, DriverView, PrefillPolicy
from servecal.sched.flowprefill.operators import OperatorModel
from servecal.sched.flowprefill.record import Recorder
from servecal.sched.flowprefill.state import Job
from servecal.sched.plan import PlanError
from servecal.sched.request import Request
from servecal.sched.result import RunResult

SETTINGS = ("prefill", "colocated")
MODES = ("event", "iteration")


@dataclass(frozen=True)
class DriverConfig:
    """``setting``: ``prefill`` | ``colocated``; ``mode``: ``event`` | ``iteration``;
    ``kv_capacity``: KV tokens of the device; ``operators``: shape and granularity."""

    setting: str = "prefill"
    mode: str = "event"
    kv_capacity: int = 500_000
    operators: OperatorModel = field(default_factory=OperatorModel)

    def __post_init__(self) -> None:
        if self.setting not in SETTINGS:
            raise ValueError(f"setting must be one of {'|'.join(SETTINGS)}, got {self.setting!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {'|'.join(MODES)}, got {self.mode!r}")
        if self.kv_capacity < 1:
            raise ValueError("kv_capacity must be >= 1")


class _Segment:
    """A batch on the device: its jobs, chunk sizes and remaining operators."""

    __slots__ = ("jobs", "tokens", "first_op", "durs", "ends", "pred", "i", "stop", "decided",
                 "start_ms", "run_ms", "energy", "total_ms", "prefix", "decision_us")  # fmt: skip

    def __init__(self, jobs: list[Job], tokens: list[int], first_op: int) -> None:
        self.jobs = jobs
        self.tokens = tokens
        self.first_op = first_op  # operators already done when this segment started
        self.i = 0  # operators of this segment finished
        self.stop: int | None = None  # park after this many operators of the segment
        self.decided = math.nan  # when the park was decided
        self.run_ms = 0.0  # device time of this segment's operators so far


class OperatorDriver:
    """One run: ``OperatorDriver(requests, policy, predictor, executor, config).run()``
    → :class:`~servecal.sched.result.RunResult` (its ``counters``: wake-ups, parked
    batches, blocking and operator times). The policy reads a :class:`DriverView`;
    ``recorder`` keeps every park's blocking time after the run."""

    def __init__(
        self,
        requests: Iterable[Request],
        policy: PrefillPolicy,
        predictor: Predictor,
        executor: Executor,
        config: DriverConfig | None = None,
        policy_name: str | None = None,
    ) -> None:
        self.config = config or DriverConfig()
        self._ops = self.config.operators
        self._colocated = self.config.setting == "colocated"
        self._polling = self.config.mode == "iteration"
        self._policy = policy
        self._name = policy_name or type(policy).__name__
        self._predictor = predictor
        self._executor = executor
        self._pending = sorted(requests, key=lambda r: (r.arrival_ms, r.rid))
        if len({r.rid for r in self._pending}) != len(self._pending):
            raise ValueError("request ids must be unique")
        self._next = 0
        self._now = self._pending[0].arrival_ms if self._pending else 0.0
        self._jobs: dict[int, Job] = {}
        self._seg: _Segment | None = None
        self._kv_used = 0
        self._event = False  # something happened since the last wake-up
        self._pred_cache: dict[tuple[int, int], float] = {}
        self.rec = Recorder(self._pending, executor)
        self.view = DriverView(self)
        # colocated decodes: every decoding request decodes in every decode iteration
        self._ready: dict[int, tuple[Request, int]] = {}  # rid -> (request, first decode idx)
        self._finish_at: dict[int, list[int]] = {}  # decode idx -> rids finishing there
        self._dec_deadline = math.inf  # earliest next-token deadline of the decoders
        self._kv_ready = 0  # KV of the decoding requests (for ctx)
        self._kv_of: dict[int, int] = {}  # KV reserved by each decoding request

    # -- what the view reads (DriverView) --------------------------------------------------
    @property
    def now_ms(self) -> float:
        return self._now

    @property
    def kv_capacity(self) -> int:
        return self.config.kv_capacity

    @property
    def kv_used(self) -> int:
        return self._kv_used

    @property
    def kv_decoding(self) -> int:
        """KV reserved by requests that finished their prefill and decode (colocated)."""
        return sum(self._kv_of.values())

    @property
    def jobs(self) -> ValuesView[Job]:
        return self._jobs.values()

    @property
    def on_device(self) -> tuple[Job, ...]:
        return tuple(self._seg.jobs) if self._seg is not None else ()

    def kv_need(self, job: Job) -> int:
        if job.holds_kv:
            return 0
        req = job.request
        return req.prompt_tokens + (req.output_tokens if self._colocated else 0)

    def _pred(self, tokens: int, prefix: int) -> float:
        key = (tokens, prefix)
        ms = self._pred_cache.get(key)
        if ms is None:
            ms = self._pred_cache[key] = float(self._predictor.predict(0, tokens, 0, prefix))
        return ms

    def remaining_ms(self, job: Job) -> float:
        """Predicted time to finish ``job``'s prefill alone from now (memoised by the
        driver per job until its progress changes)."""
        if job.chunk:
            left = 1.0 - self._ops.done_fraction(job.chunk, job.tokens_done, job.ops_done)
            rest = job.remaining_tokens - job.chunk
            after = self._pred(rest, job.tokens_done + job.chunk) if rest else 0.0
            return self._pred(job.chunk, job.tokens_done) * left + after
        rest = job.pred_rest_ms
        if rest != rest:  # NaN: not cached since tokens_done last changed
            rest = job.pred_rest_ms = self._pred(job.remaining_tokens, job.tokens_done)
        return rest

    def batch_ms(self, tokens: Sequence[int], prefixes: Sequence[int]) -> float:
        total = int(sum(tokens))
        prefix = sum(t * p for t, p in zip(tokens, prefixes, strict=True)) / total
        return float(self._predictor.predict(0, total, 0, prefix))

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> RunResult:
        """Run until every request is done; return the run."""
        self._admit()
        while self._step():
            pass
        self.rec.close(self._now)
        return self.rec.result()

    @property
    def recorder(self) -> Recorder:
        """What was recorded (e.g. ``recorder.blocking_ms``, every park's blocking time)."""
        return self.rec

    def _step(self) -> bool:
        seg = self._seg
        if seg is None:
            return self._free_device()
        idx, kind = self._next_stop(seg)
        t_stop = seg.ends[idx]
        t_arr = (
            self._pending[self._next].arrival_ms if self._next < len(self._pending) else math.inf
        )
        if t_arr < t_stop:
            self._now = t_arr
            self._admit()
            if self._policy.preemptive and not self._polling:
                self._on_arrival(seg)
            return True
        self._advance(seg, idx + 1)
        if kind == "done":
            self._complete(seg)
        elif kind == "stop":
            self._park(seg)
        elif kind == "decode":
            arrived = self.rec.admitted
            seg.ends[seg.i :] += self._decode_iteration()
            if self.rec.admitted > arrived and self._policy.preemptive and not self._polling:
                self._on_arrival(seg)
        elif not self._keeps(self._wake()):  # per-iteration mode: a boundary is a wake-up
            seg.decided = self._now
            self._park(seg)
        return True

    def _on_arrival(self, seg: _Segment) -> None:
        """Event-driven: wake on an arrival; park at the next boundary if the top changed."""
        if seg.stop is None and not self._keeps(self._wake()):
            # the first operator boundary at or after now; park after that operator
            seg.stop = seg.i + int(np.searchsorted(seg.ends[seg.i :], self._now)) + 1
            seg.decided = self._now

    def _free_device(self) -> bool:
        decision = Decision()
        if self._event or self._polling or not self._policy.preemptive:
            decision = self._wake()
        if decision.run:
            self._start(decision)
            return True
        if self._ready:
            self._decode_iteration()
            return True
        if self._next < len(self._pending):
            self._now = max(self._now, self._pending[self._next].arrival_ms)
            self._admit()
            return True
        if self._jobs:
            raise PlanError(f"policy {self._name!r} runs nothing while {len(self._jobs)} wait")
        return False

    def _next_stop(self, seg: _Segment) -> tuple[int, str]:
        """Index (into ``seg.ends``) of the next boundary where the driver acts, and why."""
        last = len(seg.ends) - 1
        idx, kind = last, "done"
        if seg.stop is not None and seg.stop - 1 < idx:
            idx, kind = seg.stop - 1, "stop"
        if self._ready and seg.i < last:
            due = seg.ends[seg.i : last] + seg.pred[seg.i + 1 :] + self._decode_pred()
            hit = np.flatnonzero(due >= self._dec_deadline)
            if hit.size and seg.i + int(hit[0]) < idx:
                idx, kind = seg.i + int(hit[0]), "decode"
        if self._polling and self._policy.preemptive and seg.i < idx:
            idx, kind = seg.i, "poll"
        return idx, kind

    # -- wake-ups --------------------------------------------------------------------------
    def _wake(self) -> Decision:
        t0 = perf_counter_ns()
        decision = self._policy.decide(self.view, self._predictor)
        self.rec.wake((perf_counter_ns() - t0) / 1000.0)
        self._event = False
        self._check(decision)
        return decision

    def _keeps(self, decision: Decision) -> bool:
        seg = self._seg
        return seg is None or not decision.run or any(j.rid == decision.top for j in seg.jobs)

    def _fail(self, what: str) -> PlanError:
        return PlanError(f"policy {self._name!r} at {self._now:.3f} ms: {what}")

    def _check(self, decision: Decision) -> None:
        seen: set[int] = set()
        ops: set[int] = set()
        need = 0
        for rid, tokens in decision.run:
            job = self._jobs.get(rid)
            if job is None or rid in seen:
                raise self._fail(f"names request {rid}, which has no prefill left or twice")
            seen.add(rid)
            if job.chunk and tokens != job.chunk:
                raise self._fail(f"resumes request {rid} with {tokens} tokens, not {job.chunk}")
            if not 1 <= tokens <= job.remaining_tokens:
                raise self._fail(f"prefills {tokens} tokens of {rid}, which has fewer left")
            ops.add(job.ops_done)
            need += self.kv_need(job)
        if len(ops) > 1:
            raise self._fail("batches requests parked at different operators")
        free = self.config.kv_capacity - self._kv_used
        if need > free:
            raise self._fail(f"needs {need} KV tokens; {free} free")

    # -- segments ----------------------------------------------------------------------------
    def _start(self, decision: Decision) -> None:
        jobs = [self._jobs[rid] for rid, _ in decision.run]
        tokens = [t for _, t in decision.run]
        for job, t in zip(jobs, tokens, strict=True):
            if not job.holds_kv:
                job.kv_tokens = self.kv_need(job)
                job.holds_kv = True
                self._kv_used += job.kv_tokens
            job.chunk = t
            job.on_device = True
        if self._ready and self._now + self._decode_pred() >= self._dec_deadline:
            self._decode_iteration()  # a decode is due before the first operator
        first = jobs[0].ops_done
        seg = _Segment(jobs, tokens, first)
        prefixes = [j.tokens_done for j in jobs]
        total = sum(tokens)
        seg.prefix = sum(t * p for t, p in zip(tokens, prefixes, strict=True)) / total
        duration, energy = self._executor.execute(0, total, 0.0, seg.prefix, self._now)
        if not duration > 0:
            raise RuntimeError(f"executor returned a non-positive duration {duration!r}")
        frac = self._ops.fractions(tokens, prefixes)[first:]
        seg.total_ms = duration
        seg.durs = duration * frac
        seg.ends = self._now + np.cumsum(seg.durs)
        p = self._predictor
        bound = float(p.predict(0, total, 0, seg.prefix, q=PLAN_QUANTILE))
        seg.pred = (bound + float(p.margin(0, total, 0, seg.prefix))) * frac
        seg.energy = energy
        seg.start_ms = self._now
        seg.decision_us = self.rec.last_decision_us
        self._seg = seg

    def _advance(self, seg: _Segment, upto: int) -> None:
        """Finish the segment's operators up to (not including) index ``upto``."""
        self._now = float(seg.ends[upto - 1])
        seg.run_ms += float(seg.durs[seg.i : upto].sum())
        self.rec.operators(seg.durs[seg.i : upto])
        seg.i = upto
        for job in seg.jobs:
            job.ops_done = seg.first_op + upto

    def _close(self, seg: _Segment, parked: bool) -> None:
        share = seg.durs[: seg.i].sum() / seg.total_ms if seg.total_ms else 0.0
        self.rec.segment(seg, share, parked, self._predictor)
        for job in seg.jobs:
            job.on_device = False
        self._seg = None
        self._event = True

    def _park(self, seg: _Segment) -> None:
        self.rec.park(self._now - seg.decided, len(seg.jobs))
        for job in seg.jobs:
            job.parks += 1
        self._close(seg, parked=True)

    def _complete(self, seg: _Segment) -> None:
        self._close(seg, parked=False)
        for job in seg.jobs:
            job.tokens_done += job.chunk
            job.pred_rest_ms = math.nan
            job.chunk = 0
            job.ops_done = 0
            if job.tokens_done == job.prompt_tokens:
                self._prefill_done(job)

    def _prefill_done(self, job: Job) -> None:
        del self._jobs[job.rid]
        job.first_ms = self._now
        req = job.request
        self.rec.first_token(job, self._now)
        if not self._colocated or req.output_tokens == 1:
            self._release(job.rid, job.kv_tokens)
            return
        self._ready[req.rid] = (req, self.rec.decode_count)
        self._kv_ready += req.prompt_tokens
        self._finish_at.setdefault(self.rec.decode_count + req.output_tokens - 2, []).append(
            req.rid
        )
        self._dec_deadline = min(self._dec_deadline, self._now + req.tpot_slo_ms)
        self._kv_of[req.rid] = job.kv_tokens

    def _release(self, rid: int, kv: int) -> None:
        self._kv_used -= kv
        self.rec.finish(rid, self._now)

    # -- colocated decodes ----------------------------------------------------------------
    def _decode_pred(self) -> float:
        n = len(self._ready)
        if not n:
            return 0.0
        ctx = self._kv_ready / n
        p = self._predictor
        return float(p.predict(n, 0, ctx, 0, q=PLAN_QUANTILE)) + float(p.margin(n, 0, ctx, 0))

    def _decode_iteration(self) -> float:
        """One decode iteration of every decoding request; returns its duration."""
        n = len(self._ready)
        ctx = self._kv_ready / n
        if self._polling and self._policy.preemptive:
            self._wake()  # per-iteration scheduling: a decode iteration is an iteration
        start = self._now
        duration, energy = self._executor.execute(n, 0, ctx, 0.0, start)
        self._now = start + duration
        idx = self.rec.decode(start, duration, energy, n, ctx, self._predictor)
        self._kv_ready += n
        for rid in self._finish_at.pop(idx, ()):
            req, first = self._ready.pop(rid)
            self._kv_ready -= req.prompt_tokens + idx - first + 1
            self._release(rid, self._kv_of.pop(rid))
            self._event = True  # KV freed: a waiting request may now fit
        slo = min((r.tpot_slo_ms for r, _ in self._ready.values()), default=math.inf)
        self._dec_deadline = self._now + slo
        self._admit()
        return duration

    # -- arrivals -----------------------------------------------------------------------------
    def _admit(self) -> None:
        pending, now = self._pending, self._now
        while self._next < len(pending) and pending[self._next].arrival_ms <= now:
            req = pending[self._next]
            self._next += 1
            job = Job(req)
            if self.kv_need(job) > self.config.kv_capacity:
                self.rec.reject(req.rid)  # can never fit, whatever the policy does
                continue
            self._jobs[req.rid] = job
            self.rec.admitted += 1
            self._event = True
