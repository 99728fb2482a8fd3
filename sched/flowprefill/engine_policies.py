"""Colocated baselines that run on the reference engine (decodes fused into every
iteration, as vLLM's chunked prefill does): ``edf-chunk-C`` needs one policy the
engine does not have, chunked prefill in deadline order."""

from __future__ import annotations

from dataclasses import dataclass

from servecal.costmodels.predictor import Predictor
from servecal.sched.plan import DECODE_ONLY, Plan
from servecal.sched.policies._common import room_for
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
        left = self.budget - view.n_decode
        if left <= 0:
            return DECODE_ONLY
        queue = sorted(
            view.prefill_queue(),
            key=lambda r: (r.arrival_ms + r.request.ttft_slo_ms, r.arrival_ms, r.rid),
        )
        chunks: list[tuple[int, int]] = []
        taken = 0
        for live in queue:
            if left <= 0:
                break
            c = min(left, room_for(view, live, taken))
            if c <= 0:
                continue
            chunks.append((live.rid, c))
            taken += c
            left -= c
        return Plan(prefill=tuple(chunks)) if chunks else DECODE_ONLY
