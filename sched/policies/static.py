"""Two static baselines: a fixed chunk, and full prefill (the token budget is in
:mod:`.budget`).

All decode every ready request every iteration and prefill the oldest incomplete
prompt first (started prompts before waiting ones).
"""

from __future__ import annotations

from dataclasses import dataclass

from servecal.costmodels.predictor import Predictor
from servecal.sched.plan import DECODE_ONLY, Plan
from servecal.sched.policies._common import room_for
from servecal.sched.view import EngineView


@dataclass(frozen=True)
class FixedChunk:
    """``fixed-C``: a prefill chunk of ``min(chunk, remaining)`` alongside all decodes
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
