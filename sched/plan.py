"""What a policy returns for one iteration: a frozen :class:`Plan`.

The engine checks every plan before running it (:class:`PlanError` names the
policy): memory after the iteration ``<= M``, no request twice, every chunk within
its remaining prefill, decodes only for requests whose prefill is done.
"""

from __future__ import annotations

import math
from typing import NamedTuple


class PlanError(ValueError):
    """A policy returned a plan the engine refuses to run (a bug in the policy)."""


class Plan(NamedTuple):
    """One iteration (immutable; a NamedTuple because one is built per iteration and a
    frozen dataclass costs several times more to construct).

    * ``decode``: request ids that decode one token, or ``None`` (the usual case,
      and the engine's fast path) for every running request whose prefill is done.
    * ``prefill``: ``(rid, tokens)`` chunks, one or several; a waiting request named
      here is admitted. Its first prefix tokens are already in KV.
    * ``preempt``: running requests to evict by recompute (KV freed, progress lost,
      re-queued at the front).
    * ``park``: running requests to pause with KV and progress kept (operator-level
      preemption); they neither decode nor prefill until a later plan names them.
    * ``reject``: waiting requests never started that admission control refuses.
    * ``exceptions``: requests whose TPOT deadline this plan knowingly breaks
      (SLOWeave's aging rule); recorded as explicit SLO exceptions.
    * ``budget_ms``: the time budget the policy planned against (NaN if none).
    """

    decode: tuple[int, ...] | None = None
    prefill: tuple[tuple[int, int], ...] = ()
    preempt: tuple[int, ...] = ()
    park: tuple[int, ...] = ()
    reject: tuple[int, ...] = ()
    exceptions: tuple[int, ...] = ()
    budget_ms: float = math.nan


#: Decode every ready request, no prefill.
DECODE_ONLY = Plan()
