"""One vLLM step's SLOWeave decision, from numbers the scheduler reads off its queues.

Plain Python (no vLLM): the vLLM scheduler reads the numbers of a
:class:`StepState` off its queues, and :func:`plan_chunk` (:func:`plan_step` on a
``StepState``) turns them into the step's token budget through
:func:`servecal.sched.policies.sloweave.deadline_chunk`, the same function the
engine's SLOWeave policy decides with.

The chunk limit is SLOWeave's (docs/spec.md §1): ``min(C_max, L)`` with ``L`` the
remaining prefill of the prompt vLLM would prefill next: one prompt's chunk per
step, as the engine policy. With ``multi_prefill`` ``L`` is the remaining prefill
of the next ``max_prefills`` prompts together, priced as one chunk at the first
prompt's prefix: the engine policy's first-fit gives the same total whenever the
later prompts start from an empty cache (the usual case), and a larger first
prefix only prices the chunk higher. The token budget is the decode tokens plus
that chunk, never above the step's token cap (vLLM's
``max_num_scheduled_tokens``); vLLM then fills it in its own order.

A chunk that would complete the prompt(s) is cut one token short when the margin
controller holds the decode batch below a step of the table's error
(``sched/policies/decode_cliff.py``), as the engine policy cuts it; with
``multi_prefill`` the cut falls on the last of the prompts.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from servecal.costmodels.predictor import Predictor
from servecal.sched.policies.margin import MarginControl
from servecal.sched.policies.sloweave import SLOWeaveConfig, controlled_chunk


class StepState(NamedTuple):
    """What SLOWeave needs to know about one step (times in ms on one clock).

    ``decode_tokens`` is ``n_decode`` times the tokens each decode carries (1, or
    1 + speculative tokens); ``next_remaining`` is the prefill left in the prompt(s)
    SLOWeave may chunk (0 when no prompt waits), ``next_prefix`` the first one's
    cached prefix, ``next_waited_ms`` how long that prompt has waited since it arrived
    (SLOWeave's aging rule, when configured).
    """

    now_ms: float
    n_decode: int
    decode_tokens: int
    ctx: float
    earliest_deadline_ms: float
    next_prefix: int
    next_remaining: int
    token_cap: int
    next_waited_ms: float = 0.0


class StepPlan(NamedTuple):
    """The decision: ``chunk`` prefill tokens, ``token_budget`` for vLLM's step
    (``None``: leave vLLM's own budget), ``budget_ms`` until the earliest deadline."""

    chunk: int
    token_budget: int | None
    budget_ms: float


#: The plan when no prompt waits: vLLM schedules its decodes untouched.
DECODE_ONLY = StepPlan(0, None, math.nan)


def plan_chunk(
    predictor: Predictor,
    config: SLOWeaveConfig,
    now_ms: float,
    n_decode: int,
    decode_tokens: int,
    ctx: float,
    earliest_deadline_ms: float,
    next_prefix: int,
    next_remaining: int,
    token_cap: int,
    next_waited_ms: float = 0.0,
    control: MarginControl | None = None,
) -> tuple[int, int | None, float]:
    """:func:`plan_step` on the numbers themselves (:class:`StepState`'s fields, in its
    order) and as a plain ``(chunk, token_budget, budget_ms)``: what the vLLM
    scheduler calls every step, with no tuple class built around either side.

    ``control``: the engine's margin controller (``config.controller()``, one per
    engine, kept across steps; ``None``: plan on the whole budget). A step that does
    not call this must still call ``control.settle(now_ms)``, and a finished request
    ``control.finished(output_tokens - 1)``, as the engine policy does."""
    if next_remaining <= 0:
        if control is not None:  # controlled_chunk settles it on the other path
            control.settle(now_ms)
        return DECODE_ONLY
    room = token_cap - decode_tokens
    limit = max(0, min(config.c_max, next_remaining, room))
    # no decode running: no deadline binds (budget inf)
    chunk, budget, _aged = controlled_chunk(
        control, predictor, config, n_decode, ctx, next_prefix, limit,
        now_ms, earliest_deadline_ms, next_waited_ms, next_remaining,
    )  # fmt: skip
    tokens = min(token_cap, decode_tokens + chunk)
    # a zero budget would stop vLLM from scheduling anything, even the decodes
    return chunk, tokens if tokens > 0 else None, budget


def plan_step(
    state: StepState,
    predictor: Predictor,
    config: SLOWeaveConfig,
    control: MarginControl | None = None,
) -> StepPlan:
    """SLOWeave's chunk for ``state`` and the token budget that gives vLLM exactly it."""
    return StepPlan._make(plan_chunk(predictor, config, *state, control=control))
