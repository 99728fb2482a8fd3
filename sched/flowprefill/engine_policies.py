"""Colocated baselines that run on the reference engine (decodes fused into every
iteration, as vLLM's chunked prefill does): ``edf-chunk-C`` needs one policy the
engine does not have, chunked prefill in deadline order."""

from __future__ import annotations

from dataclasses import dataclass

from servecal.costmodels.predictor import Predictor
from servecal.sched.plan import DECODE_ONLY, Plan
from servecal.sched.policies._common import fill_token_budget
from servecal.sched.view import EngineView


@dataclass(frozen=True)
class EdfTokenBudget:
    """vLLM's token budget ``C`` (decodes first), prefill chunks taken from the
    incomplete prompts in TTFT-deadline order (``arrival + TTFT_SLO``)."""

    budget: int

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise ValueError("EdfTokenBudget.budget must be >= 1")

    def plan(self, view: EngineView, predictor: Predictor) -> Plan:
        if self.budget <= view.n_decode:
            return DECODE_ONLY
        queue = sorted(
            view.prefill_queue(),
            key=lambda r: (r.arrival_ms + r.request.ttft_slo_ms, r.arrival_ms, r.rid),
        )
        chunks = fill_token_budget(view, queue, self.budget, skip_unfit=True)
        return Plan(prefill=chunks) if chunks else DECODE_ONLY
