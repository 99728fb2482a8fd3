"""Shared prompt prefixes for a synthetic workload: system prompts and multi-turn sessions.

``NAME+prefix`` (e.g. ``chat+prefix``) is workload ``NAME`` with prefix identity
(:attr:`Request.block_ids`, docs/prefix_cache.md) given by :func:`with_shared_prefixes`:

* every SLO class has its own system prompt of ``system_prompt_tokens``, the start of
  each of its conversations;
* requests are turns of sessions: an arrival continues one of at most
  ``open_sessions`` open sessions of its class (drawn uniformly) or opens a new one;
  a session has a geometric number of turns with mean ``mean_turns``;
* turn k+1's prompt is turn k's prompt, turn k's output and the drawn prompt (the new
  user message), so it extends turn k. A session whose next prompt would pass the
  context limit ends; the arrival opens a new one.

Block ids follow the token sequence: a block wholly inside the system prompt has the
class's id for that position, any later block the session's, so two turns of one
session (and two sessions of one class) share exactly the blocks their prompts have
in common. Arrivals and outputs are the base workload's (same draws); prompts grow,
and the TTFT SLO grows with them at the default rule's 0.5 ms per prompt token.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from servecal.sched.request import Request

#: Suffix of a workload name that asks for shared prefixes.
SHARED_SUFFIX = "+prefix"
#: ms of TTFT SLO per extra prompt token (the default rule's slope).
_TTFT_MS_PER_TOKEN = 0.5


@dataclass(frozen=True)
class SharedPrefix:
    """The generator's parameters (module docstring)."""

    system_prompt_tokens: int = 1024
    mean_turns: float = 4.0
    open_sessions: int = 32
    block_size: int = 512

    def __post_init__(self) -> None:
        if self.system_prompt_tokens < 0 or self.block_size < 1 or self.open_sessions < 1:
            raise ValueError("SharedPrefix: system prompt >= 0, block size and sessions >= 1")
        if not self.mean_turns >= 1:
            raise ValueError("SharedPrefix.mean_turns must be >= 1")


@dataclass(eq=False)
class _Session:
    sid: int
    prompt: int  # tokens of the conversation so far (the next turn's prefix)
    turns_left: int


def _block_ids(
    cls: str, sid: int, prompt: int, config: SharedPrefix, ids: dict[tuple, int]
) -> tuple[int, ...]:
    """Ids of a prompt's blocks: the class's inside the system prompt, else the session's."""
    out = []
    b = config.block_size
    for i in range(-(-prompt // b)):
        key = ("sys", cls, i) if (i + 1) * b <= config.system_prompt_tokens else ("s", sid, i)
        out.append(ids.setdefault(key, len(ids)))
    return tuple(out)


def with_shared_prefixes(
    requests: list[Request],
    rng: np.random.Generator,
    config: SharedPrefix | None = None,
    context_limit: int = 1 << 62,
) -> list[Request]:
    """``requests`` as turns of sessions under system prompts (module docstring)."""
    config = config or SharedPrefix()
    open_by_class: dict[str, list[_Session]] = {}
    ids: dict[tuple, int] = {}
    out = []
    n_sessions = 0
    for r in requests:
        sessions = open_by_class.setdefault(r.slo_class, [])
        pick = int(rng.integers(config.open_sessions))
        session = sessions[pick] if pick < len(sessions) else None
        if (
            session is not None
            and session.prompt + r.prompt_tokens + r.output_tokens > context_limit
        ):
            sessions.remove(session)
            session = None
        if session is None:
            turns = int(rng.geometric(1.0 / config.mean_turns))
            session = _Session(n_sessions, config.system_prompt_tokens, turns)
            n_sessions += 1
            if len(sessions) < config.open_sessions:
                sessions.append(session)
        prompt = min(session.prompt + r.prompt_tokens, context_limit - r.output_tokens)
        blocks = _block_ids(r.slo_class, session.sid, prompt, config, ids)
        extra = prompt - r.prompt_tokens
        out.append(
            replace(
                r,
                prompt_tokens=prompt,
                ttft_slo_ms=r.ttft_slo_ms + _TTFT_MS_PER_TOKEN * extra,
                block_ids=blocks,
                block_size=config.block_size,
            )
        )
        session.prompt = prompt + r.output_tokens
        session.turns_left -= 1
        if session.turns_left <= 0 and session in sessions:
            sessions.remove(session)
    return out
