"""The torch executor: each planned iteration runs as a real forward pass.

The engine's :class:`~servecal.sched.executor.Executor` protocol passes only an
iteration's shape; which requests decode and which chunks prefill come from the
plan the policy just returned, which :class:`PlanTap` (a transparent wrapper of
the policy) keeps, and from the engine's read-only view. At each ``execute``:

1. requests that finished or were preempted by recompute since the last call give
   their KV blocks back (their KV in the engine is gone: done, or re-queued with
   nothing prefilled); every other holder must hold exactly the engine's KV count;
2. decoders (the plan's ``decode``, or every ready, non-parked request) feed their
   last token at position ``kv``; each prefill chunk feeds its next ``chunk``
   tokens of prompt (+ outputs, after a recompute) after its ``prefix``;
3. blocks are reserved, the pass runs (:class:`~.forward.ForwardRun`), and the
   argmax of each decode row — and of each chunk that completes its prefill — is
   the request's next token.

Tokens are real outputs of the random-weight model; only their number matters and
it is the engine's (one per completed prefill, one per decode).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from servecal.profiler.energy import EnergyMeter
from servecal.profiler.model import Transformer
from servecal.profiler.timing import CpuClock, CudaClock, LayerScale
from servecal.sched.live import LiveRequest, Phase
from servecal.sched.plan import Plan
from servecal.sched.policy import Policy
from servecal.sched.torch_executor.forward import ForwardRun, PagedBatch, StopSignal
from servecal.sched.torch_executor.pool import PagedKVPool
from servecal.sched.view import EngineView


class PlanTap:
    """Wraps a policy and remembers its last plan (what the executor must run).

    Every other attribute (``observe``, ``summary``, ...) is the wrapped policy's.
    """

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.last: Plan | None = None

    def plan(self, view: EngineView, predictor: Any) -> Plan:
        self.last = self.policy.plan(view, predictor)
        return self.last

    def __getattr__(self, name: str) -> Any:
        if name == "policy":  # not set yet (e.g. while copying): no recursion
            raise AttributeError(name)
        return getattr(self.policy, name)


class TorchExecutor:
    """Runs an engine's iterations on ``model`` with KV in ``pool`` (see module doc).

    Call :meth:`bind` with the engine's view and the :class:`PlanTap` given to the
    engine before the run, and :meth:`release_finished` after it (the last
    completions happen after the last ``execute``).
    """

    def __init__(
        self,
        model: Transformer,
        pool: PagedKVPool,
        scale: LayerScale,
        clock: CpuClock | CudaClock,
        rng: np.random.Generator,
        meter: EnergyMeter | None = None,
    ) -> None:
        self.model = model
        self.pool = pool
        self.scale = scale
        self.clock = clock
        self.meter = meter
        self.energy_source = f"measured:{meter.source}" if meter is not None else "none"
        self._rng = rng
        self._view: EngineView | None = None
        self._tap: PlanTap | None = None
        self._last_j: float | None = None
        self._seq: dict[int, list[int]] = {}  # prompt + generated tokens, per request
        self.outputs: dict[int, list[int]] = {}  # token ids generated, per request
        self.tokens_generated = 0
        self.iterations = 0
        self.busy_ms = 0.0
        self.frees = 0

    def bind(self, view: EngineView, tap: PlanTap) -> None:
        self._view, self._tap = view, tap
        self._last_j = self.meter.read_j() if self.meter is not None else None

    # -- the Executor protocol --------------------------------------------------------
    def execute(
        self, n_decode: int, chunk: int, ctx: float, prefix: float, now_ms: float
    ) -> tuple[float, float | None]:
        run = self.begin()
        if run.batch.n_decode != n_decode or run.batch.chunk != chunk:
            raise RuntimeError(
                f"torch executor: the plan runs {run.batch.n_decode} decodes and "
                f"{run.batch.chunk} prefill tokens; the engine asked for {n_decode} and {chunk}"
            )
        run.run()
        energy = None
        if self.meter is not None:
            # NVML's counter moves every few tens of ms, slower than an iteration: each
            # iteration is charged the counter's movement since the previous one ended
            # (lumpy per iteration, exact in sum), scaled like time when fewer layers
            # are built than the model has (constant power, as calibration assumes).
            now_j = self.meter.read_j()
            used = now_j - (self._last_j if self._last_j is not None else now_j)
            self._last_j = now_j
            measured = sum(run.segments)
            energy = used * run.duration_ms / measured if measured > 0 else 0.0
        self.finish(run)
        return run.duration_ms, energy

    # -- the pieces (also used directly for operator-level preemption) ----------------
    def begin(self) -> ForwardRun:
        """Free finished KV, reserve this plan's blocks and build its (not yet run) pass."""
        if self._view is None or self._tap is None or self._tap.last is None:
            raise RuntimeError("torch executor: bind(view, tap) before the engine runs")
        view, plan = self._view, self._tap.last
        self.release_finished()
        if plan.decode is None:
            decoders = [live for live in view.ready if not live.parked]
        else:
            decoders = [view.get(rid) for rid in plan.decode]
        pool = self.pool
        rids, lengths, ids = [], [], []
        # Longest first: requests of similar length share an attention call (buckets).
        decoders.sort(key=lambda live: -pool.tokens(live.rid))
        for live in decoders:
            kv = pool.tokens(live.rid)
            pool.reserve(live.rid, kv + 1)
            rids.append(live.rid)
            lengths.append(kv)
            ids.append(self._seq[live.rid][-1])
        prefills = []
        for rid, tokens in plan.prefill:
            live = view.get(rid)
            seq = self._sequence(live)
            start = live.prefilled
            pool.reserve(rid, start + tokens)
            prefills.append((rid, start, tokens))
            ids += seq[start : start + tokens]
        tokens_t = torch.tensor(ids, dtype=torch.long, device=self.model.device)
        batch = PagedBatch(pool, rids, lengths, prefills, tokens_t)
        return ForwardRun(self.model, batch, self.clock, self.scale)

    def finish(self, run: ForwardRun) -> None:
        """Commit a completed pass: cached lengths move on, sampled tokens are appended."""
        if run.logits is None:
            raise RuntimeError("torch executor: finish() on a pass that has not completed")
        batch, view = run.batch, self._view
        assert view is not None
        next_ids = run.logits.argmax(dim=-1).tolist()
        pairs = zip(batch.decode_rids, batch.decode_lengths, strict=True)
        for i, (rid, length) in enumerate(pairs):
            self.pool.commit(rid, length + 1)
            self._emit(rid, next_ids[i])
        for j, (rid, start, tokens) in enumerate(batch.prefills):
            self.pool.commit(rid, start + tokens)
            if start + tokens == view.get(rid).prefill_target:  # the prefill's first token
                self._emit(rid, next_ids[batch.n_decode + j])
        self.iterations += 1
        self.busy_ms += run.duration_ms

    def release_finished(self) -> None:
        """Give back the blocks of requests that are done or were preempted by recompute."""
        view = self._view
        assert view is not None
        pool = self.pool
        for rid in pool.holders():
            live = view.get(rid)
            held = pool.tokens(rid)
            if live.phase == Phase.DONE or live.kv_tokens == 0:
                pool.free(rid)
                self.frees += 1
                if live.phase == Phase.DONE:
                    self._seq.pop(rid, None)
            elif held != live.kv_tokens:
                raise RuntimeError(
                    f"torch executor: request {rid} holds {held} KV tokens, "
                    f"the engine says {live.kv_tokens}"
                )

    # -- tokens -----------------------------------------------------------------------
    def _sequence(self, live: LiveRequest) -> list[int]:
        """Prompt (drawn once, uniformly from the vocabulary) plus the tokens generated."""
        seq = self._seq.get(live.rid)
        if seq is None:
            vocab = self.model.shape.vocab
            seq = self._rng.integers(0, vocab, size=live.prompt_tokens).tolist()
            self._seq[live.rid] = seq
        if len(seq) != live.prefill_target:
            raise RuntimeError(
                f"torch executor: request {live.rid} has {len(seq)} tokens, "
                f"its prefill target is {live.prefill_target}"
            )
        return seq

    def _emit(self, rid: int, token: int) -> None:
        self._seq[rid].append(token)
        self.outputs.setdefault(rid, []).append(token)
        self.tokens_generated += 1

    @property
    def generated(self) -> dict[int, int]:
        """Tokens generated per request."""
        return {rid: len(tokens) for rid, tokens in self.outputs.items()}

    def summary(self) -> dict[str, Any]:
        pool = self.pool
        return {
            "iterations": self.iterations,
            "busy_ms": self.busy_ms,
            "kv_blocks": pool.n_blocks,
            "kv_block_size": pool.block_size,
            "kv_peak_blocks": pool.peak_blocks,
            "kv_peak_tokens": pool.peak_tokens,
            "kv_frees": self.frees,
            "tokens_generated": self.tokens_generated,
        }


__all__ = ["PlanTap", "StopSignal", "TorchExecutor"]
