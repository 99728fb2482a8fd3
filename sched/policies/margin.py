"""What SLOWeave asks of a margin controller (:class:`MarginControl`).

:func:`~servecal.sched.policies.sloweave.controlled_chunk` decides through these
methods alone, so the engine policy and the vLLM plug-in decide alike under any
controller (the pooled :class:`~servecal.sched.policies.miss_control.GapMissControl`,
the per-region :class:`~servecal.sched.policies.region_control.RegionMissControl`)
without asking which one it holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

#: ``fit(limit, scale) -> chunk``: the largest chunk up to ``limit`` that the budget ×
#: ``scale`` fits (SLOWeave's ``deadline_chunk`` with its arguments bound).
Fit = Callable[[int, float], int]
#: ``median(chunk) -> ms``: the table's P50 for the decision's batch with ``chunk``.
Median = Callable[[int], float]


class MarginControl(Protocol):
    """A budget scale learned online from the iterations it planned.

    Each decision: ``settle(now_ms)`` scores the last counted iteration, ``choose``
    gives the chunk (through ``fit``, under the controller's scale or scales) and,
    unless the aging rule overrode it, ``count`` hears of the chunk decided (the
    controller keeps it pending when it is one it learns from). ``finished(gaps)``:
    a request completed; ``scale()``: the pooled scale (for budgets fitted outside
    ``choose``); ``holds(n_after, decode_ms)``: whether to leave a prompt one token
    short rather than complete it into a batch of ``n_after`` decodes.
    """

    def settle(self, now_ms: float) -> None: ...

    def scale(self) -> float: ...

    def finished(self, gaps: int) -> None: ...

    def holds(self, n_after: int, decode_ms: Callable[[int], float]) -> bool: ...

    def summary(self) -> dict[str, float | int]: ...

    def choose(
        self,
        fit: Fit,
        limit: int,
        prefix: int = 0,
        n_decode: int = 0,
        ctx: float = 0.0,
        median: Median | None = None,
    ) -> int: ...

    def count(
        self, deadline_ms: float, chunk: int, limit: int, now_ms: float, median: Median
    ) -> None: ...
