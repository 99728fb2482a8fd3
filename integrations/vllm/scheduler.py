"""vLLM v1 schedulers whose token budget SLOWeave sets every step (docs/vllm.md).

Each ``schedule()``: read the decode count, their mean context and earliest
deadline (last token + TPOT SLO), and the prompt vLLM would prefill next; ask
SLOWeave (:func:`~servecal.integrations.vllm.planner.plan_chunk`, through the same
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

vLLM's scheduler interface is not public: this module is tested against the
releases in :data:`~servecal.integrations.vllm.TESTED_VLLM_VERSIONS` (another one
starts with a warning) and imports vLLM at import time (nothing else in servecal
does).

With ``"policy": "vllm"`` the budget is left alone: vLLM schedules as it would
without the plug-in, and the plug-in only logs its steps (the baseline a
comparison needs, measured by the same instrumentation).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from itertools import islice
from operator import attrgetter
from typing import Any

import vllm
from vllm.logger import init_logger
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from servecal.integrations.vllm.config import (
    REQUEST_SLO_KEYS,
    PluginConfig,
    PluginConfigError,
    load_config,
)
from servecal.integrations.vllm.due import DueTimes
from servecal.integrations.vllm.kvsum import RunningKV
from servecal.integrations.vllm.planner import DECODE_ONLY, plan_chunk
from servecal.integrations.vllm.tables import check_model, load_table
from servecal.sched.policies.sloweave import SLOWeaveConfig
from servecal.util.errors import InputError

# a child of vLLM's own logger, so that its handlers and format apply to these lines
logger = init_logger("vllm.servecal")

#: Steps between two reads of the energy counter (a read costs µs; NVML's counter
#: moves only every 10-100 ms anyway, so reading every step buys no detail).
ENERGY_EVERY = 8
_INF = math.inf
_NAN = math.nan
_NONE: tuple[()] = ()  # shared empty sequence: no allocation per step
_computed = attrgetter("num_computed_tokens")


def _vllm_config(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return kwargs["vllm_config"] if "vllm_config" in kwargs else args[0]


class _InFlight:
    """A scheduled step waiting for its output, and what its completion will change."""

    __slots__ = ("row", "sched_end", "fast", "emitted", "skipped", "first", "pred_ms",
                 "stopped", "preempted", "shape")  # fmt: skip

    def __init__(self, row: list[float], sched_end: float, fast: bool, emitted: Sequence[Any],
                 skipped: Sequence[Any], first: Sequence[Any], pred_ms: float,
                 stopped: Sequence[str], preempted: Sequence[str]) -> None:  # fmt: skip
        self.row = row  # STEP_FIELDS, start, duration_ms and raw_ms to fill (None: no log)
        self.sched_end = sched_end
        self.fast = fast  # every decoding request ran (then emitted/skipped are empty)
        self.emitted = emitted  # otherwise: the decoding requests that ran ...
        self.skipped = skipped  # ... and those that did not
        self.first = first  # requests whose prefill ends here: their first token
        self.pred_ms = pred_ms  # predicted P50 duration (async planning only)
        self.stopped = stopped  # ids of ``skipped`` (for the log)
        self.preempted = preempted  # ids vLLM preempted while scheduling it
        # (n_decode, chunk, prefix) for the asynchronous prediction (from the log's row
        # when there is one)
        self.shape = (row[2], row[3], row[6]) if row else None


#: A synchronous step without a run folder in which every decode ran and no prefill
#: ended: all it will do is move every due time (shared, never changed).
_EVERY_DECODE = _InFlight(None, _NAN, True, _NONE, _NONE, _NONE, _NAN, _NONE, _NONE)


def _mixed_row(start: float, n_decode: int, ctx: float, prefill: Sequence[Any],
               tokens: Sequence[int], decision_us: float,
               plan: tuple[int, int | None, float]) -> list[float]:  # fmt: skip
    """The log row of a step whose ``prefill`` requests got ``tokens`` each: their
    prefix is what each had computed before the step, weighted by its tokens."""
    chunk = sum(tokens)
    weighted = sum((r.num_computed_tokens - t) * t for r, t in zip(prefill, tokens, strict=True))
    planned, budget, budget_ms = plan
    return [
        start, _NAN, n_decode, chunk, len(prefill), ctx, weighted / chunk if chunk else 0.0,
        decision_us, budget_ms, planned, _NAN if budget is None else budget, _NAN,
    ]  # fmt: skip


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
        """The plug-in's state from its settings: the table, SLOWeave's configuration
        and margin controller, the books kept across steps, the run log."""
        table = load_table(cfg.table, cfg.quantile, cfg.use_margin)
        self._sw_check_versions(cfg, table)
        self._sw_cfg = cfg
        self._sw_observe = cfg.policy == "vllm"
        self._sw_table = table
        cap = self.max_num_scheduled_tokens
        self._sw_sloweave = SLOWeaveConfig(
            c_max=cfg.c_max or cap,
            quantile=cfg.quantile,
            use_margin=cfg.use_margin,
            multi_prefill=cfg.multi_prefill,
            max_prefills=cfg.max_prefills,
            margin_control=cfg.margin_control,
        )
        # SLOWeave's margin controller, one per engine as in the engine policy (None:
        # margin_control "fixed", or vLLM's own scheduling: nothing is planned)
        self._sw_control = None if self._sw_observe else self._sw_sloweave.controller()
        # gap counts of requests freed since the last schedule(): the engine policy
        # scores the last iteration first, then counts the finished (same order here)
        self._sw_finished: list[int] = []
        self._sw_prompts = cfg.max_prefills if cfg.multi_prefill else 1
        self._sw_async = bool(self.scheduler_config.async_scheduling)
        self._sw_tokens_per_decode = 1 + int(getattr(self, "num_spec_tokens", 0) or 0)
        self._sw_slo = cfg.tpot_slo_ms
        self._sw_ttft = cfg.ttft_slo_ms if cfg.ttft_slo_ms is not None else _INF
        # keyed by vLLM's Request objects (hashed by identity: no id strings per step)
        self._sw_due = DueTimes(cfg.tpot_slo_ms)
        # the running requests' KV sum, kept between steps where every change to it is
        # seen (not with speculative tokens' rollbacks or a KV connector's failed loads)
        self._sw_kv = RunningKV(
            trusted=self._sw_tokens_per_decode == 1 and getattr(self, "connector", None) is None
        )
        self._sw_aging = self._sw_sloweave.aging_ms is not None
        self._sw_inflight: dict[int, _InFlight] = {}
        self._sw_clock = time.perf_counter  # seconds; tests drive a fake one
        # vLLM keeps the running requests still prefilling in a set (see _sw_partials)
        self._sw_inflight_prefills = hasattr(self, "_inflight_prefills")
        self._sw_perf0 = self._sw_clock()
        self._sw_last_update = -_INF
        self._sw_busy_until = -_INF  # async: when the GPU frees up (predicted)
        self._sw_now_ms = math.nan  # the step end being processed in update_from_output
        self._sw_log = None if cfg.run_dir is None else self._sw_open_log(cfg, table, cap)
        # a step whose every decode ran, no prefill ended, nothing logged, nothing
        # predicted: its record is the shared _EVERY_DECODE
        self._sw_plain = self._sw_log is None and not self._sw_async
        self._sw_announce(cfg)

    def _sw_check_versions(self, cfg: PluginConfig, table: Any) -> None:
        """The table against the served model (``check_model``: another model shape or
        dtype refuses, a table without a shape warns), and a warning for a vLLM release
        the plug-in is not tested against."""
        model_config = self.vllm_config.model_config
        if cfg.check_model:
            dtype = str(getattr(model_config, "dtype", "")).removeprefix("torch.") or None
            warning = check_model(
                table, cfg.table, model_config.hf_config, dtype, str(model_config.model)
            )
            if warning:
                logger.warning("servecal: %s", warning)
        from servecal.integrations.vllm import TESTED_VLLM_VERSIONS

        if vllm.__version__ not in TESTED_VLLM_VERSIONS:
            logger.warning(
                "servecal: vLLM %s is not a release the plug-in is tested against (%s)",
                vllm.__version__,
                ", ".join(TESTED_VLLM_VERSIONS),
            )

    def _sw_announce(self, cfg: PluginConfig) -> None:
        """One line in vLLM's log saying what the plug-in does on this server."""
        where = f", run folder {cfg.run_dir}" if cfg.run_dir else ""
        if self._sw_observe:
            logger.info("servecal: vLLM's own scheduling, steps logged against %s%s",
                        cfg.table, where)  # fmt: skip
            return
        logger.info(
            "servecal: SLOWeave on %s (TPOT SLO %.1f ms, C_max %d, plan on P%g%s)%s",
            cfg.table,
            cfg.tpot_slo_ms,
            self._sw_sloweave.c_max,
            cfg.quantile * 100,
            " + margin" if cfg.use_margin else "",
            where,
        )

    def _sw_open_log(self, cfg: PluginConfig, table: Any, cap: int) -> Any:
        """The run folder's log (:class:`~servecal.integrations.vllm.runlog.RunLog`), with
        the plug-in's and vLLM's settings in its ``run.json``."""
        from servecal.integrations.vllm.runlog import RunLog

        model_config = self.vllm_config.model_config

        energy, energy_source = self._sw_energy(cfg.energy_meter)
        return RunLog(
            cfg.run_dir,
            table,
            {
                "policy": "vllm-default" if self._sw_observe else "sloweave-vllm",
                "workload": "vllm",
                "executor": "vllm",
                "tpot_slo_ms": cfg.tpot_slo_ms,
                "ttft_slo_ms": cfg.ttft_slo_ms,
                "servecal": cfg.describe(),
                "sloweave": {"c_max": self._sw_sloweave.c_max},
                "vllm": {
                    "version": vllm.__version__,
                    "model": str(model_config.model),
                    "max_num_scheduled_tokens": cap,
                    "max_num_seqs": self.max_num_running_reqs,
                    "async_scheduling": self._sw_async,
                    "speculative_tokens": self._sw_tokens_per_decode - 1,
                    # wall time of the log's 0 ms: lines its steps up with a client's
                    "clock_origin_unix": time.time() - (self._sw_clock() - self._sw_perf0),
                },
            },
            cfg.flush_every,
            cfg.flush_s,
            energy,
            energy_source,
        )

    def _sw_energy(self, prefer: str) -> tuple[Any, str]:
        """The run log's energy: the engine's GPUs' counters (or the host's RAPL, or the
        user's ``MODULE:NAME`` meter), read every :data:`ENERGY_EVERY` steps;
        ``(None, "unavailable")`` when none opens."""
        from servecal.integrations.vllm.energy import (
            UNAVAILABLE,
            StepEnergy,
            load_meter,
            open_energy_meter,
        )

        if ":" in prefer:  # MODULE:NAME, a meter of the user's: failing to load it stops vLLM
            try:
                meter = load_meter(prefer)
            except InputError as exc:
                raise PluginConfigError(str(exc)) from None
            return StepEnergy(meter, every=ENERGY_EVERY), meter.source
        parallel = self.vllm_config.parallel_config
        gpus = list(range(max(1, int(getattr(parallel, "world_size", 1) or 1))))
        meter, notice = open_energy_meter(prefer, gpus)
        if meter is None:
            if notice:  # energy_meter none says nothing
                logger.info("servecal: %s", notice)
            return None, UNAVAILABLE
        return StepEnergy(meter, every=ENERGY_EVERY), meter.source

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
                self._sw_due.set_slo(request, slos["tpot_slo_ms"])
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
        if self._sw_control is not None:
            self._sw_finished.append(request.num_output_tokens - 1)
        self._sw_due.forget(request)
        self._sw_kv.left(request)
        log = self._sw_log
        if log is not None:
            now = self._sw_now_ms if not math.isnan(self._sw_now_ms) else self._sw_ms()
            log.finished(request.request_id, now, log.steps - 1, request.num_output_tokens)
        return super()._free_request(request, *args, **kwargs)

    def _preempt_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        self._sw_kv.invalidate()  # its tokens reset to 0, it leaves running: recount
        return super()._preempt_request(request, *args, **kwargs)

    def _handle_stopped_request(self, request: Any) -> bool:
        if getattr(request, "resumable", False):  # its tokens roll back, it may stay
            self._sw_kv.invalidate()
        return super()._handle_stopped_request(request)

    # -- the step --------------------------------------------------------------------------
    # schedule() runs right after vLLM's step has pushed the plug-in out of the CPU's
    # caches, where each Python call costs microseconds (docs/vllm.md, "Cost"): its usual
    # path makes two calls of its own, the plan and the step's record; reading the state
    # and vLLM's call under the budget are written in it, the rare cases in helpers, and
    # nothing passes over the running requests.
    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        """One step, in five parts (numbered in the code):

        1. the margin controller scores the last planned step (:meth:`_sw_settle`);
        2. the state: prompts still prefilling (vLLM's ``_inflight_prefills``), the
           decodes' count and mean context (the KV sum :class:`RunningKV` keeps) and
           the prompt(s) vLLM would prefill next (:meth:`_sw_next_prompts`);
        3. :meth:`_sw_plan`: SLOWeave's chunk and token budget (``plan_chunk``);
        4. vLLM's own ``schedule()`` with its token cap at that budget for this one
           call (restored whatever happens), then the kept KV sum after it;
        5. :meth:`_sw_step_of`: the step's record, kept until its output arrives.
        """
        # One function: parts 2 and 4 in this frame (complexity 22), because a call for
        # each cost 1.2x the plug-in's added time (docs/results/2026-12-02-vllm-plugin-readable.md)
        clock = self._sw_clock
        t0 = clock()
        now = (t0 - self._sw_perf0) * 1000.0
        # async: this step starts when the one in flight ends (predicted)
        start = max(now, self._sw_busy_until) if self._sw_async else now
        if self._sw_control is not None:  # 1
            self._sw_control.settle(start)
            if self._sw_finished:
                self._sw_settle()
        running = self.running  # 2
        n_before = len(running)
        inflight = self._inflight_prefills if self._sw_inflight_prefills else None
        if inflight is not None and len(inflight) <= 1:  # the usual case: one or none
            partial = list(inflight) if inflight else _NONE
        else:
            partial = self._sw_partials(running)
        kv_book = self._sw_kv
        if kv_book.valid and n_before == len(kv_book.members):  # the usual case: kept
            kv = kv_book.kv
        else:
            kv = kv_book.total(running)
        if partial:
            kv -= sum(map(_computed, partial))
        n = n_before - len(partial)
        ctx = kv / n if n else 0.0
        if len(partial) == self._sw_prompts:  # the usual case: the prompt(s) being chunked
            prompts = partial
        else:
            prompts = self._sw_next_prompts(partial, n_before)
        plan = self._sw_plan(start, n, ctx, prompts)  # 3
        # the decision's own time, for the run folder (on the plug-in's clock)
        decision_us = (clock() - t0) * 1e6 if self._sw_log is not None else _NAN
        budget, cap = plan[1], self.max_num_scheduled_tokens  # 4
        if budget is not None and budget < cap:
            self.max_num_scheduled_tokens = budget
        try:
            out = super().schedule(*args, **kwargs)
        except BaseException:
            kv_book.invalidate()  # recounted next step
            raise
        finally:
            self.max_num_scheduled_tokens = cap
        if out.preempted_req_ids:  # not modelled by the kept sum: recounted next step
            kv_book.invalidate()
        elif kv_book.valid:
            if len(self.running) == n_before:  # none admitted: every token stays running
                kv_book.kv += out.total_num_scheduled_tokens
            else:
                kv_book.scheduled(self.running, n_before, out.num_scheduled_tokens,
                                  out.total_num_scheduled_tokens)  # fmt: skip
        if out.scheduled_new_reqs and self._sw_log is not None:
            self._sw_admitted(out.scheduled_new_reqs)
        if out.total_num_scheduled_tokens <= 0:
            return out
        step = self._sw_step_of(out, start, n, ctx, n_before, partial, prompts, decision_us, plan)
        if self._sw_async:  # the next step is planned before this one's tokens exist
            n_decode, chunk, prefix = step.shape
            step.pred_ms = float(self._sw_table.predict(n_decode, chunk, ctx, prefix))
            self._sw_busy_until = start + step.pred_ms
            self._sw_apply(step, self._sw_busy_until)
        self._sw_inflight[id(out)] = step
        return out

    def _sw_admitted(self, new_reqs: Sequence[Any]) -> None:
        """Log what vLLM's prefix cache served each request it admitted for the first
        time: a new request's ``num_computed_tokens`` in the step's output is taken
        after vLLM's prefix-cache lookup and before this step's tokens are added (a
        resumed request is not new, so only the first admission counts)."""
        log = self._sw_log
        for new in new_reqs:
            log.admitted(new.req_id, int(new.num_computed_tokens))

    def _sw_settle(self) -> None:
        """The margin controller hears of the requests freed since the last step (after
        scoring it, as the engine policy does): each one's gaps, output tokens − 1."""
        control = self._sw_control
        for gaps in self._sw_finished:
            control.finished(gaps)
        self._sw_finished.clear()

    def _sw_partials(self, running: list[Any]) -> Sequence[Any]:
        """Running requests still prefilling, in vLLM's order (a pass over the running
        requests only where vLLM keeps no ``_inflight_prefills`` set, or several)."""
        inflight = getattr(self, "_inflight_prefills", None)
        if inflight is None:
            return [r for r in running if r.is_prefill_chunk]
        return [r for r in running if r in inflight]

    def _sw_next_prompts(self, partial: Sequence[Any], n_running: int) -> Sequence[Any]:
        """The prompts vLLM would prefill next, in its order: running ones still
        prefilling, then the waiting queues (KV holders first), while a slot is free.
        One prompt, or up to ``max_prefills`` with ``multi_prefill``."""
        k = self._sw_prompts
        if len(partial) >= k:
            return partial[:k]
        found = list(partial)
        free = self.max_num_running_reqs - n_running
        for queue in (getattr(self, "kv_holding_waiting", None), self.waiting):
            if len(found) >= k or free <= 0:
                break
            if queue:
                taken = list(islice(queue, min(k - len(found), free)))
                found += taken
                free -= len(taken)
        return found

    def _sw_plan(
        self, start: float, n: int, ctx: float, prompts: Sequence[Any]
    ) -> tuple[int, int | None, float]:
        """SLOWeave's ``(chunk, token_budget, budget_ms)`` for the first of ``prompts``
        (:func:`plan_chunk`); :data:`DECODE_ONLY` when there is nothing to prefill or
        vLLM schedules on its own (``policy: vllm``)."""
        if not prompts or self._sw_observe:
            return DECODE_ONLY
        first = prompts[0]
        prefix = first.num_computed_tokens
        if len(prompts) == 1:
            remaining = first.num_tokens - prefix
        else:
            remaining = sum([r.num_tokens - r.num_computed_tokens for r in prompts])
        # the prompt's wait matters only to the aging rule
        waited = max(0.0, time.time() - first.arrival_time) * 1000.0 if self._sw_aging else 0.0
        due = self._sw_due
        if n and not due.apart and not due.decoding_own:  # every decode due together
            deadline = due.bulk + due.slo
        else:
            deadline = due.earliest(n)
        return plan_chunk(
            self._sw_table, self._sw_sloweave, start, n, n * self._sw_tokens_per_decode,
            ctx, deadline, prefix, remaining, self.max_num_scheduled_tokens, waited,
            self._sw_control,
        )  # fmt: skip

    def _sw_step_of(self, out: Any, start: float, n: int, ctx: float, n_before: int,
                    partial: Sequence[Any], prompts: Sequence[Any], decision_us: float,
                    plan: tuple[int, int | None, float]) -> _InFlight:  # fmt: skip
        """What vLLM scheduled in ``out``: the step's record, kept until its output
        arrives (with the step's shape, for the asynchronous prediction).

        The two usual steps, every decode ran and the one prompt planned for got its
        ``tok`` tokens (or, decodes only, none), nothing preempted or admitted beyond
        it, are told apart by token and request counts alone, with no pass over the
        decodes; :meth:`_sw_sort_out` works any other ``out`` request by request.
        """
        # One function: the usual steps' checks side by side in one frame (complexity 18),
        # because a call per check costs microseconds on the cold cache schedule() runs in
        nst = out.num_scheduled_tokens
        tok = nst.get(prompts[0].request_id) if len(prompts) == 1 else None
        new_reqs = out.scheduled_new_reqs
        usual = (
            len(partial) <= len(prompts)
            and self._sw_tokens_per_decode == 1
            and not out.preempted_req_ids
            and len(nst) == (n if tok is None else n + 1)
            and out.total_num_scheduled_tokens == n + (tok or 0)
        )
        if usual and tok is None:  # decodes only
            usual = len(prompts) <= 1 and not new_reqs
            tok, prefix, done = 0, 0, _NONE
        elif usual:
            first = prompts[0]
            usual = not new_reqs or (len(new_reqs) == 1 and new_reqs[0].req_id == first.request_id)
            # what the prompt had computed before this step (vLLM has added tok; a
            # prefix-cache hit of a prompt just admitted was added too)
            prefix = first.num_computed_tokens - tok
            done = _NONE if first.is_prefill_chunk else prompts  # its prefill ends here
        if not usual:
            return self._sw_sort_out(out, start, n, ctx, n_before, partial, prompts,
                                     decision_us, plan)  # fmt: skip
        if self._sw_plain and not done:  # nothing of its own to keep
            return _EVERY_DECODE
        return self._sw_every_decode(start, n, tok, ctx, prefix, done, decision_us, plan)

    def _sw_every_decode(self, start: float, n: int, tok: int, ctx: float, prefix: int,
                         done: Sequence[Any], decision_us: float,
                         plan: tuple[int, int | None, float]) -> _InFlight:  # fmt: skip
        """The record of a step in which every decode ran, with ``tok`` tokens of one
        prompt (``done``: it, if its prefill ended)."""
        row = None  # the log's row: only with a run folder
        if self._sw_log is not None:
            chunk, budget, budget_ms = plan
            row = [
                start, _NAN, n, tok, 1 if tok else 0, ctx, float(prefix), decision_us,
                budget_ms, chunk, _NAN if budget is None else budget, _NAN,
            ]  # fmt: skip
        sched_end = (self._sw_clock() - self._sw_perf0) * 1000.0 if row else _NAN
        step = _InFlight(row, sched_end, True, _NONE, _NONE, done, _NAN, _NONE, _NONE)
        step.shape = (n, tok, prefix)
        return step

    def _sw_sort_out(self, out: Any, start: float, n: int, ctx: float, n_before: int,
                     partial: Sequence[Any], prompts: Sequence[Any], decision_us: float,
                     plan: tuple[int, int | None, float]) -> _InFlight:  # fmt: skip
        """What vLLM scheduled, request by request (when :meth:`_sw_step_of`'s usual
        steps do not hold). Only the planned prompts may have prefilled, and every
        decode ran, when the counts say so; otherwise :meth:`_sw_by_request` reads
        each request."""
        nst = out.num_scheduled_tokens
        preempted_ids = getattr(out, "preempted_req_ids", None)
        preempted = list(preempted_ids) if preempted_ids else _NONE
        prefill = [r for r in prompts if r.request_id in nst]
        tokens = [nst[r.request_id] for r in prefill]
        fast = not preempted and self._sw_only_planned(out, n, partial, prompts, prefill, tokens)
        emitted: Sequence[Any] = _NONE
        skipped: Sequence[Any] = _NONE
        n_sched = n
        if not fast:
            emitted, skipped, prefill = self._sw_by_request(nst, n_before, partial, preempted)
            n_sched = len(emitted)
            tokens = [nst[r.request_id] for r in prefill]
        row = _mixed_row(start, n_sched, ctx, prefill, tokens, decision_us, plan)
        for rid in preempted:  # a preempted request re-prefills: not decoding until then
            req = self.requests.get(rid)
            if req is not None:
                self._sw_due.left(req)
        return _InFlight(
            row, (self._sw_clock() - self._sw_perf0) * 1000.0, fast, emitted, skipped,
            [r for r in prefill if not r.is_prefill_chunk] if prefill else _NONE,  # 1st token
            _NAN, [r.request_id for r in skipped] if skipped else _NONE, preempted,
        )  # fmt: skip

    def _sw_only_planned(self, out: Any, n: int, partial: Sequence[Any], prompts: Sequence[Any],
                         prefill: Sequence[Any], tokens: Sequence[int]) -> bool:  # fmt: skip
        """Every decode ran, and only planned prompts (``prefill``, ``tokens`` each) were
        prefilled or admitted: told by counts, no pass over the decodes."""
        new_reqs = out.scheduled_new_reqs
        return (
            self._sw_tokens_per_decode == 1
            and len(partial) <= len(prompts)  # every partial prefill was a candidate
            and len(out.num_scheduled_tokens) == n + len(prefill)
            and out.total_num_scheduled_tokens == n + sum(tokens)
            and (not new_reqs or {x.req_id for x in new_reqs} <= {r.request_id for r in prompts})
        )

    def _sw_by_request(
        self, nst: dict[str, int], n_before: int, partial: Sequence[Any], preempted: Sequence[str]
    ) -> tuple[list[Any], list[Any], list[Any]]:
        """``(decodes that ran, decodes that did not, requests that prefilled)``, from
        vLLM's running list as it was before scheduling (``n_before`` long): vLLM only
        appends admitted requests to it, or removes preempted ones, never both in one
        step."""
        running, requests = self.running, self.requests
        if preempted:  # nothing was admitted: the list less what was preempted
            before = [*running, *(requests[i] for i in preempted if i in requests)]
        else:  # nothing was removed: admitted requests were appended
            before = running[:n_before]
        pset = set(partial)
        decoding = [r for r in before if r not in pset]
        gone = set(preempted)  # they stopped decoding altogether
        emitted = [r for r in decoding if r.request_id in nst]
        skipped = [r for r in decoding if r.request_id not in nst and r.request_id not in gone]
        seen = {r.request_id for r in emitted}
        return emitted, skipped, [requests[i] for i in nst if i not in seen]

    def _sw_apply(self, step: _InFlight, token_ms: float) -> None:
        """``step``'s tokens come out at ``token_ms``: move the due times."""
        due = self._sw_due
        if step.fast:
            due.all_emitted(token_ms)
        else:
            due.some_emitted(step.emitted, step.skipped, token_ms)
        for req in step.first:
            due.started(req, token_ms)

    def _sw_rechain(self, now: float) -> None:
        """Async: due times of the requests in steps still in flight, from their
        predicted ends now that the step before them is known to have ended."""
        end = now
        for step in self._sw_inflight.values():
            end += step.pred_ms if step.pred_ms == step.pred_ms else 0.0  # NaN: sync
            self._sw_apply(step, end)
        self._sw_busy_until = end

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        now = self._sw_ms()
        step = self._sw_inflight.pop(id(scheduler_output), None)
        if step is not None:
            self._sw_apply(step, now)
            log = self._sw_log
            if log is not None:
                start = max(step.sched_end, self._sw_last_update)
                row = step.row
                row[0] = start
                row[1] = now - start
                row[11] = now - step.sched_end
                k = log.step(row)  # the step is done with it
                for req in step.first:
                    log.started(req.request_id, k)
                for rid in step.stopped:
                    log.stopped(rid, k - 1)
                for rid in step.preempted:
                    log.preempted(rid, k - 1)
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
