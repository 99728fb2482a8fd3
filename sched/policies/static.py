"""The static baselines: fixed chunk, vLLM token budget, full prefill.

All decode every ready request every iteration and prefill the oldest incomplete
prompt first (started prompts before waiting ones).
"""

from __future__ import annotations

from dataclasses import dataclass

from servecal.costmodels.predictor import Predictor
from servecal.sched.plan import DECODE_ONLY, Plan
from servecal.sched.policies._common import fill_token_budget, room_for
from servecal.sched.view import EngineView


@dataclass(frozen=True)
class FixedChunk:
    """``fixed-C``: a prefill chunk of ``min(C, remaining)`` alongside all decodes
    (Sarathi-style)."""

    chunk: int

    def __post_init__(self) -> None:
        if self.chunk < 1:
            raise ValueError("FixedChunk.chunk must be >= 1")

    def plan(self, view: EngineView, predictor: Predictor) -> Plan:
        live = view.next_prefill()
        if live is None:
            return DECODE_ONLY
        c = min(self.chunk, room_for(view, live))
        return Plan(prefill=((live.rid, c),)) if c > 0 else DECODE_ONLY


@dataclass(frozen=True)
class TokenBudget:
    """``budget-C``: vLLM's ``max_num_batched_tokens``. Decodes first, then prefill tokens
    from the queue in order, several prompts if needed, up to ``C`` tokens in all."""

    budget: int

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise ValueError("TokenBudget.budget must be >= 1")

    def plan(self, view: EngineView, predictor: Predictor) -> Plan:
        chunks = fill_token_budget(view, view.prefill_queue(), self.budget)
        return Plan(prefill=chunks) if chunks else DECODE_ONLY


@dataclass(frozen=True)
class FullPrefill:
    """``full``: the whole remaining prompt in one iteration (no chunking)."""

    def plan(self, view: EngineView, predictor: Predictor) -> Plan:
        live = view.next_prefill()
        if live is None:
            return DECODE_ONLY
        c = room_for(view, live)
        if c < live.remaining_prefill:  # no chunking: wait until the whole prompt fits
            return DECODE_ONLY
        return Plan(prefill=((live.rid, c),))
