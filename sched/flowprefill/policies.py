"""FlowPrefill and its baselines on the operator-level driver.

* :class:`FlowPrefill` (docs/spec.md §3): priority ``sign(slack)/d``; the top request runs,
  the running batch is parked at its next operator boundary when the top is not
  in it; SLO-aware batching of short requests; KV-aware admission. Its ablations
  change one thing each: ``preemptive=False`` keeps the ordering but decides only
  when the device is free (no operator preemption); ``order="srpt"`` keeps operator
  preemption but orders by shortest remaining prefill (deadline-blind).
* :class:`Fcfs`: arrival order, whole prompts, short ones packed up to a token cap
  (DistServe-like prefill instance), never preempts.
* :class:`TokenBudgetChunks`: vLLM-like chunked prefill, ``budget`` tokens per
  iteration filled from the queue in arrival (``fcfs-chunk-C``) or deadline
  (``edf-chunk-C``) order; the order is re-decided at every chunk boundary, which is
  the only preemption these policies have.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from servecal.costmodels.predictor import Predictor
from servecal.sched.flowprefill.decision import Decision, DriverView
from servecal.sched.flowprefill.priority import priority_order
from servecal.sched.flowprefill.state import Job
from servecal.sched.policies.budget import check_budget, fill_budget

#: FlowPrefill batches short requests up to this many tokens (docs/spec.md §3).
BATCH_TOKENS = 2048
#: ... while the top request keeps this share of its TTFT SLO as slack.
KEEP_SLACK = 0.10


def _fits(view: DriverView, job: Job, reserved: int = 0) -> bool:
    return view.kv_need(job) + reserved <= view.kv_free


@dataclass(frozen=True)
class FlowPrefill:
    """docs/spec.md §3. ``order``: ``"slack"`` (the paper's ``sign(slack)/d``) or ``"srpt"``
    (ablation: shortest remaining prefill first)."""

    preemptive: bool = True
    order: str = "slack"
    batch_tokens: int = BATCH_TOKENS
    keep_slack: float = KEEP_SLACK
    batching: bool = True

    def __post_init__(self) -> None:
        if self.order not in ("slack", "srpt"):
            raise ValueError("FlowPrefill.order must be 'slack' or 'srpt'")
        if self.batch_tokens < 1:
            raise ValueError("FlowPrefill.batch_tokens must be >= 1")
        if not 0 <= self.keep_slack < 1:
            raise ValueError("FlowPrefill.keep_slack must be in [0, 1)")

    def _ordered(self, view: DriverView) -> list[Job]:
        if self.order == "srpt":
            return sorted(view.jobs, key=lambda j: (view.remaining_ms(j), j.arrival_ms, j.rid))
        return priority_order(view.jobs, view.now_ms, view.remaining_ms)

    def decide(self, view: DriverView, predictor: Predictor) -> Decision:
        ranked = self._ordered(view)
        # KV-aware admission: the highest-priority request that holds or fits its KV.
        top = next((j for j in ranked if _fits(view, j)), None)
        if top is None:
            return Decision()
        if top.on_device:  # keep the batch on the device
            return Decision(tuple((j.rid, j.chunk) for j in view.on_device))
        if top.in_flight:  # parked mid-prefill: resume alone from its operator
            return Decision(((top.rid, top.chunk),))
        batch = [(top.rid, top.remaining_tokens)]
        if self.batching and top.remaining_tokens <= self.batch_tokens:
            batch = self._batch(view, ranked, top)
        return Decision(tuple(batch))

    def _batch(self, view: DriverView, ranked: list[Job], top: Job) -> list[tuple[int, int]]:
        """SLO-aware batching: add waiting requests in priority order while the batch
        stays within the token cap, fits in KV and leaves the top request ≥ 10% of its
        TTFT SLO as slack after the predicted batch time; a candidate that would break
        a condition is skipped (a later, smaller one may still fit)."""
        tokens = [top.remaining_tokens]
        prefixes = [top.tokens_done]
        batch = [(top.rid, top.remaining_tokens)]
        reserved = view.kv_need(top)
        spare = top.deadline_ms - view.now_ms - self.keep_slack * top.ttft_slo_ms
        for job in ranked:
            if sum(tokens) >= self.batch_tokens:
                break
            if job is top or job.on_device or job.ops_done:
                continue
            t = job.remaining_tokens
            if sum(tokens) + t > self.batch_tokens or not _fits(view, job, reserved):
                continue
            if view.batch_ms(tokens + [t], prefixes + [job.tokens_done]) > spare:
                continue
            tokens.append(t)
            prefixes.append(job.tokens_done)
            batch.append((job.rid, t))
            reserved += view.kv_need(job)
        return batch


@dataclass(frozen=True)
class Fcfs:
    """Arrival order, whole prompts; following prompts packed while the total stays
    within ``batch_tokens`` (a single longer prompt runs alone). Never preempts."""

    batch_tokens: int = BATCH_TOKENS
    preemptive: ClassVar[bool] = False

    def decide(self, view: DriverView, predictor: Predictor) -> Decision:
        batch: list[tuple[int, int]] = []
        total = reserved = 0
        for job in view.jobs:  # arrival order
            if not _fits(view, job, reserved):
                break  # strict FCFS: no overtaking of a request that waits for KV
            t = job.remaining_tokens
            if batch and total + t > self.batch_tokens:
                break
            batch.append((job.rid, t))
            total += t
            reserved += view.kv_need(job)
        return Decision(tuple(batch))


@dataclass(frozen=True)
class TokenBudgetChunks:
    """vLLM-like chunked prefill: up to ``budget`` tokens per iteration, prompts taken
    in ``order`` (``"fcfs"``: arrival, started prompts first; ``"edf"``: deadline
    ``arrival + TTFT_SLO``) and split across iterations where they do not fit; the
    engine's :class:`~servecal.sched.policies.budget.TokenBudget` on this driver (the
    same :func:`~servecal.sched.policies.budget.fill_budget`)."""

    budget: int
    order: str = "fcfs"
    preemptive: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_budget(self.budget, self.order, "TokenBudgetChunks")

    def decide(self, view: DriverView, predictor: Predictor) -> Decision:
        jobs = list(view.jobs)
        if self.order == "edf":
            jobs.sort(key=lambda j: (j.deadline_ms, j.arrival_ms, j.rid))
        else:  # started prompts first (vLLM keeps running requests ahead of the queue)
            jobs.sort(key=lambda j: (not j.holds_kv, j.arrival_ms, j.rid))
        reserved = 0

        def room(job: Job, taken: int) -> int:  # a positive answer takes the job
            nonlocal reserved
            need = view.kv_need(job)
            if need + reserved > view.kv_free:
                return 0
            reserved += need
            return job.remaining_tokens

        return Decision(fill_budget(jobs, self.budget, room, self.order == "edf"))
