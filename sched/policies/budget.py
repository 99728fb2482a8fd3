"""vLLM's per-iteration token budget (``max_num_batched_tokens``), on both backends.

:func:`fill_budget` is the one implementation of the fill: decodes take their
tokens first, then prompts in queue order, several if needed, until the budget is
spent; a prompt that does not fit stops the fill (FCFS head-of-line, as vLLM) or
is skipped (deadline order). :class:`TokenBudget` runs it on the engine; the
operator-level driver's :class:`~servecal.sched.flowprefill.policies.TokenBudgetChunks`
runs the same function over its jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from servecal.costmodels.predictor import Predictor
from servecal.sched.plan import DECODE_ONLY, Plan
from servecal.sched.policies._common import room_for
from servecal.sched.view import EngineView

#: Queue orders: arrival (started prompts first), or TTFT deadline ``arrival + TTFT SLO``.
ORDERS = ("fcfs", "edf")


class _Queued(Protocol):
    rid: int


Q = TypeVar("Q", bound=_Queued)


def fill_budget(
    queue: Iterable[Q], tokens: int, room: Callable[[Q, int], int], skip_unfit: bool
) -> tuple[tuple[int, int], ...]:
    """Prefill chunks ``(rid, tokens)`` filling ``tokens`` from ``queue`` in order.

    ``room(item, taken)`` is the most tokens ``item`` may get with ``taken`` tokens
    already planned (0: it does not fit); it is asked once per item, in order, and a
    positive answer takes the item. An item that does not fit stops the fill unless
    ``skip_unfit``."""
    left = tokens
    chunks: list[tuple[int, int]] = []
    taken = 0
    for item in queue:
        if left <= 0:
            break
        c = min(left, room(item, taken))
        if c <= 0:
            if skip_unfit:
                continue
            break
        chunks.append((item.rid, c))
        taken += c
        left -= c
    return tuple(chunks)


def check_budget(budget: int, order: str, owner: str) -> None:
    if budget < 1:
        raise ValueError(f"{owner}.budget must be >= 1")
    if order not in ORDERS:
        raise ValueError(f"{owner}.order must be one of {', '.join(ORDERS)}, got {order!r}")


@dataclass(frozen=True)
class TokenBudget:
    """``budget-C``: up to ``budget`` tokens per iteration, decodes first, then prefill
    tokens from the incomplete prompts in ``order``: ``fcfs`` (started prompts
    first, then the queue; a prompt that does not fit stops the fill) or ``edf``
    (TTFT deadline ``arrival + TTFT SLO``; a prompt that does not fit is skipped)."""

    budget: int
    order: str = "fcfs"

    def __post_init__(self) -> None:
        check_budget(self.budget, self.order, "TokenBudget")

    def plan(self, view: EngineView, predictor: Predictor) -> Plan:
        left = self.budget - view.n_decode
        if left <= 0 or view.next_prefill() is None:  # most iterations: decodes only
            return DECODE_ONLY
        queue: Iterable = view.prefill_queue()
        if self.order == "edf":
            queue = sorted(
                queue, key=lambda r: (r.arrival_ms + r.request.ttft_slo_ms, r.arrival_ms, r.rid)
            )
        chunks = fill_budget(
            queue, left, lambda live, taken: room_for(view, live, taken), self.order == "edf"
        )
        return Plan(prefill=chunks) if chunks else DECODE_ONLY
