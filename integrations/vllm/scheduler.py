"""vLLM v1 schedulers whose token budget SLOWeave sets every step (docs/vllm.md).

Each ``schedule()``: read the decode count, their mean context and earliest
deadline (last token + TPOT SLO), and the prompt vLLM would prefill next; ask
SLOWeave (:func:`~servecal.integrations.vllm.planner.plan_step`, through the same
``deadline_chunk`` as the engine policy) for the chunk; set the step's token cap
to decodes + chunk for this one call; let vLLM's own scheduler do the rest. The
cap is restored before ``schedule()`` returns, whatever happens.

``update_from_output()`` closes the step: its actual time (below) goes into the
run folder, its tokens move the requests' deadlines.

**Step time.** From the end of the step's ``schedule()`` (or from the previous
step's ``update_from_output()``, if that came later) to the start of its own
``update_from_output()``. Synchronously this is the model executor's forward pass,
sampling, the structured-output bitmask and the engine core's wait on the
workers; it excludes ``schedule()``, ``update_from_output()`` and everything in
the API server. With asynchronous scheduling (:class:`SLOWeaveAsyncScheduler`,
chosen automatically when vLLM runs async), step ``k+1`` is scheduled while ``k``
runs, so the interval starts when ``k``'s output came back: the GPU time of
``k+1`` as long as the GPU stays busy. ``raw_ms`` keeps the plain interval.

vLLM's scheduler interface is not public: this module is written against
vLLM :data:`~servecal.integrations.vllm.VLLM_VERSION` and imports it at import
time (nothing else in servecal does).
"""

from __future__ import annotations

import math
import time
from itertools import islice, repeat
from typing import Any

from vllm.logger import init_logger
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from servecal.integrations.vllm.config import (
    REQUEST_SLO_KEYS,
    PluginConfig,
    PluginConfigError,
    load_config,
)
from servecal.integrations.vllm.planner import StepState, plan_step
from servecal.integrations.vllm.tables import check_model, load_table
from servecal.sched.policies.sloweave import SLOWeaveConfig

# a child of vLLM's own logger, so that its handlers and format apply to these lines
logger = init_logger("vllm.servecal")

_INF = math.inf


def _vllm_config(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return kwargs["vllm_config"] if "vllm_config" in kwargs else args[0]


class _InFlight:
    """A scheduled step waiting for its output."""

    __slots__ = ("row", "sched_end", "emit", "pred_ms")

    def __init__(self, row: list[float], sched_end: float, emit: list[str], pred_ms: float) -> None:
        self.row = row  # STEP_FIELDS with duration_ms and raw_ms still to fill
        self.sched_end = sched_end
        self.emit = emit  # requests that produce a token when the step completes
        self.pred_ms = pred_ms  # predicted P50 duration (async planning only)


class SLOWeaveScheduler(Scheduler):
    """vLLM's scheduler with SLOWeave's per-step token budget from a servecal cost table.

    Constructed by vLLM from ``--scheduler-cls servecal.integrations.vllm.SLOWeaveScheduler``
    with its own arguments (passed through untouched); configured by
    ``--additional-config '{"servecal": {...}}'`` (:class:`PluginConfig`). When vLLM
    schedules asynchronously the instance is a :class:`SLOWeaveAsyncScheduler`.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> SLOWeaveScheduler:
        if cls is SLOWeaveScheduler:
            vllm_config = _vllm_config(args, kwargs)
            if vllm_config.scheduler_config.async_scheduling:
                cls = SLOWeaveAsyncScheduler
        return super().__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        try:
            self._sw_setup(load_config(self.vllm_config.additional_config))
        except PluginConfigError as exc:
            logger.error("%s", exc)
            raise

    # -- setup ---------------------------------------------------------------------------
    def _sw_setup(self, cfg: PluginConfig) -> None:
        model_config = self.vllm_config.model_config
        table = load_table(cfg.table, cfg.quantile, cfg.use_margin)
        if cfg.check_model:
            dtype = str(getattr(model_config, "dtype", "")).removeprefix("torch.") or None
            warning = check_model(
                table, cfg.table, model_config.hf_config, dtype, str(model_config.model)
            )
            if warning:
                logger.warning("servecal: %s", warning)
        self._sw_cfg = cfg
        self._sw_table = table
        cap = self.max_num_scheduled_tokens
        self._sw_sloweave = SLOWeaveConfig(
            c_max=cfg.c_max or cap,
            quantile=cfg.quantile,
            use_margin=cfg.use_margin,
            multi_prefill=cfg.multi_prefill,
            max_prefills=cfg.max_prefills,
        )
        self._sw_prompts = cfg.max_prefills if cfg.multi_prefill else 1
        self._sw_async = bool(self.scheduler_config.async_scheduling)
        self._sw_tokens_per_decode = 1 + int(getattr(self, "num_spec_tokens", 0) or 0)
        self._sw_slo = cfg.tpot_slo_ms
        self._sw_ttft = cfg.ttft_slo_ms if cfg.ttft_slo_ms is not None else _INF
        self._sw_custom: dict[str, float] = {}  # request_id -> its own TPOT SLO
        self._sw_deadline: dict[str, float] = {}  # request_id -> next token due (ms)
        self._sw_inflight: dict[int, _InFlight] = {}
        self._sw_clock = time.perf_counter  # seconds; tests drive a fake one
        self._sw_perf0 = self._sw_clock()
        self._sw_last_update = -_INF
        self._sw_busy_until = -_INF  # async: when the GPU frees up (predicted)
        self._sw_now_ms = math.nan  # the step end being processed in update_from_output
        self._sw_log = None
        if cfg.run_dir is not None:
            from servecal.integrations.vllm import VLLM_VERSION
            from servecal.integrations.vllm.runlog import RunLog

            self._sw_log = RunLog(
                cfg.run_dir,
                table,
                {
                    "policy": "sloweave-vllm",
                    "workload": "vllm",
                    "executor": "vllm",
                    "tpot_slo_ms": cfg.tpot_slo_ms,
                    "ttft_slo_ms": cfg.ttft_slo_ms,
                    "servecal": cfg.describe(),
                    "sloweave": {"c_max": self._sw_sloweave.c_max},
                    "vllm": {
                        "version": VLLM_VERSION,
                        "model": str(model_config.model),
                        "max_num_scheduled_tokens": cap,
                        "max_num_seqs": self.max_num_running_reqs,
                        "async_scheduling": self._sw_async,
                        "speculative_tokens": self._sw_tokens_per_decode - 1,
                    },
                },
                cfg.flush_every,
            )
        logger.info(
            "servecal: SLOWeave on %s (TPOT SLO %.1f ms, C_max %d, plan on P%g%s)%s",
            cfg.table,
            cfg.tpot_slo_ms,
            self._sw_sloweave.c_max,
            cfg.quantile * 100,
            " + margin" if cfg.use_margin else "",
            f", run folder {cfg.run_dir}" if cfg.run_dir else "",
        )

    def _sw_ms(self) -> float:
        """Now, in ms since the scheduler started (the run folder's time axis)."""
        return (self._sw_clock() - self._sw_perf0) * 1000.0

    # -- requests --------------------------------------------------------------------------
    def add_request(self, request: Any) -> None:
        super().add_request(request)
        rid = request.request_id
        params = request.sampling_params
        extra = getattr(params, "extra_args", None) if params is not None else None
        slos = {"tpot_slo_ms": self._sw_slo, "ttft_slo_ms": self._sw_ttft}
        if extra:
            for key in REQUEST_SLO_KEYS:
                if key in extra:
                    slos[key] = self._sw_request_slo(rid, key, extra[key], slos[key])
            if slos["tpot_slo_ms"] != self._sw_slo:
                self._sw_custom[rid] = slos["tpot_slo_ms"]
        if self._sw_log is not None:
            self._sw_log.arrived(
                rid,
                # arrival_time is wall time in the API server: how long ago, on our clock
                self._sw_ms() - max(0.0, time.time() - request.arrival_time) * 1000.0,
                request.num_prompt_tokens,
                int(getattr(request, "max_tokens", 1) or 1),
                slos["ttft_slo_ms"],
                slos["tpot_slo_ms"],
            )

    @staticmethod
    def _sw_request_slo(rid: str, key: str, raw: Any, default: float) -> float:
        try:
            value = float(raw)
        except (TypeError, ValueError):
            value = math.nan
        if not value > 0:
            logger.warning("servecal: request %s: %s=%r ignored (need a number > 0)", rid, key, raw)
            return default
        return value

    def _free_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        rid = request.request_id
        self._sw_deadline.pop(rid, None)
        self._sw_custom.pop(rid, None)
        if self._sw_log is not None:
            now = self._sw_now_ms if not math.isnan(self._sw_now_ms) else self._sw_ms()
            self._sw_log.finished(rid, now, request.num_output_tokens)
        return super()._free_request(request, *args, **kwargs)

    # -- the step --------------------------------------------------------------------------
    def _sw_state(self, now_ms: float) -> tuple[StepState, list[str]]:
        """The step as SLOWeave sees it, and the decoding requests' ids."""
        running = self.running
        decoding = [r for r in running if not r.is_prefill_chunk]
        ids = [r.request_id for r in decoding]
        n = len(decoding)
        ctx = sum([r.num_computed_tokens for r in decoding]) / n if n else 0.0
        earliest = min(map(self._sw_deadline.get, ids, repeat(_INF)), default=_INF)
        prompts = self._sw_next_prompts(running, len(decoding) < len(running))
        first = prompts[0] if prompts else None
        remaining = sum([r.num_tokens - r.num_computed_tokens for r in prompts])
        state = StepState(
            now_ms=now_ms,
            n_decode=n,
            decode_tokens=n * self._sw_tokens_per_decode,
            ctx=ctx,
            earliest_deadline_ms=earliest,
            next_prefix=first.num_computed_tokens if first is not None else 0,
            next_remaining=max(0, remaining),
            token_cap=self.max_num_scheduled_tokens,
        )
        return state, ids

    def _sw_next_prompts(self, running: list[Any], partial: bool) -> list[Any]:
        """The prompts vLLM would prefill next, in its order: running ones still
        prefilling, then the waiting queues (KV holders first), while a slot is free.
        One prompt, or up to ``max_prefills`` with ``multi_prefill``."""
        k = self._sw_prompts
        found = [r for r in running if r.is_prefill_chunk][:k] if partial else []
        free = self.max_num_running_reqs - len(running)
        for queue in (getattr(self, "kv_holding_waiting", None), self.waiting):
            if len(found) >= k or free <= 0:
                break
            if queue:
                taken = list(islice(queue, min(k - len(found), free)))
                found += taken
                free -= len(taken)
        return found

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        now = self._sw_ms()
        # async: this step starts when the one in flight ends (predicted)
        state, ids = self._sw_state(max(now, self._sw_busy_until) if self._sw_async else now)
        plan = plan_step(state, self._sw_table, self._sw_sloweave)
        decision_us = (time.perf_counter() - t0) * 1e6
        cap = self.max_num_scheduled_tokens
        if plan.token_budget is not None and plan.token_budget < cap:
            self.max_num_scheduled_tokens = plan.token_budget
            try:
                out = super().schedule(*args, **kwargs)
            finally:
                self.max_num_scheduled_tokens = cap
        else:
            out = super().schedule(*args, **kwargs)
        if out.total_num_scheduled_tokens > 0:
            self._sw_record(out, state, plan, ids, decision_us)
        return out

    def _sw_record(self, out: Any, state: StepState, plan: Any, ids: list[str],
                   decision_us: float) -> None:  # fmt: skip
        """Remember what vLLM actually scheduled, for the step's log row and deadlines."""
        sched_end = self._sw_ms()
        nst = out.num_scheduled_tokens
        got = list(map(nst.get, ids))
        missing = got.count(None)
        emit = ids if not missing else [i for i, g in zip(ids, got, strict=True) if g is not None]
        decode_tokens = sum(filter(None, got))
        chunk = out.total_num_scheduled_tokens - decode_tokens
        prefix = 0.0
        n_prefills = 0
        if chunk > 0:  # the few prefilling requests: prefix and who gets a first token
            requests = self.requests
            weighted = 0
            first_tokens = []
            for rid in nst.keys() - set(ids):
                req = requests[rid]
                tokens = nst[rid]
                weighted += (req.num_computed_tokens - tokens) * tokens  # cached before it
                n_prefills += 1
                if not req.is_prefill_chunk:  # its prefill ends in this step
                    first_tokens.append(rid)
            prefix = weighted / chunk
            if first_tokens:
                emit = [*emit, *first_tokens]
        row = [
            state.now_ms,
            math.nan,
            len(ids) - missing,
            chunk,
            n_prefills,
            state.ctx,
            prefix,
            decision_us,
            plan.budget_ms,
            plan.chunk,
            math.nan if plan.token_budget is None else plan.token_budget,
            math.nan,
        ]
        pred = math.nan
        if self._sw_async:  # the next step is planned before this one's tokens exist
            pred = float(self._sw_table.predict(len(ids) - missing, chunk, state.ctx, prefix))
            self._sw_busy_until = state.now_ms + pred
            self._sw_set_deadlines(emit, self._sw_busy_until)
        self._sw_inflight[id(out)] = _InFlight(row, sched_end, emit, pred)
        preempted = getattr(out, "preempted_req_ids", None)
        if preempted and self._sw_log is not None:
            for rid in preempted:
                self._sw_log.preempted(rid)

    def _sw_set_deadlines(self, emit: list[str], token_ms: float) -> None:
        deadline = self._sw_deadline
        deadline.update(dict.fromkeys(emit, token_ms + self._sw_slo))
        custom = self._sw_custom
        if custom:
            for rid in custom.keys() & set(emit):
                deadline[rid] = token_ms + custom[rid]

    def _sw_rechain(self, now: float) -> None:
        """Async: due times of the requests in steps still in flight, from their
        predicted ends now that the step before them is known to have ended."""
        end = now
        for step in self._sw_inflight.values():
            end += step.pred_ms if step.pred_ms == step.pred_ms else 0.0  # NaN: sync
            self._sw_set_deadlines(step.emit, end)
        self._sw_busy_until = end

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        now = self._sw_ms()
        step = self._sw_inflight.pop(id(scheduler_output), None)
        if step is not None:
            start = max(step.sched_end, self._sw_last_update)
            row = step.row
            row[0] = start
            row[1] = now - start
            row[11] = now - step.sched_end
            self._sw_set_deadlines(step.emit, now)
            if self._sw_log is not None:
                self._sw_log.step(tuple(row))
                self._sw_log.emitted(step.emit, now)
            if self._sw_inflight:  # async: the steps still running started now, in order
                self._sw_rechain(now)
        self._sw_last_update = now
        self._sw_now_ms = now
        try:
            return super().update_from_output(scheduler_output, model_runner_output)
        finally:
            self._sw_now_ms = math.nan

    def shutdown(self) -> None:
        try:
            if getattr(self, "_sw_log", None) is not None:
                self._sw_log.close()
                logger.info("servecal: run folder written to %s", self._sw_log.folder)
        finally:
            super().shutdown()


class SLOWeaveAsyncScheduler(SLOWeaveScheduler, AsyncScheduler):
    """:class:`SLOWeaveScheduler` on vLLM's asynchronous scheduler (``--async-scheduling``,
    vLLM's default where supported): ``SLOWeaveScheduler`` becomes this class by itself."""
