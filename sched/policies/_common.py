"""Helpers shared by the policies."""

from __future__ import annotations

from collections.abc import Iterable

from servecal.sched.live import LiveRequest, Phase
from servecal.sched.view import EngineView

#: Fraction of ``M`` kept free when a new request is admitted (vLLM's watermark).
WATERMARK = 0.01


def room_for(view: EngineView, live: LiveRequest, taken: int = 0) -> int:
    """Most prefill tokens ``live`` may get this iteration, ``taken`` already planned.

    Within the KV left after every decode. A request not started yet is admitted
    only when its whole remaining prefill fits with a 1% watermark (vLLM's rule), so
    that a prefill is not evicted again as soon as the decodes grow; on an empty
    server, whenever it fits at all.
    """
    room = view.prefill_room - taken
    need = live.remaining_prefill
    alone = view.kv_used + taken == 0  # nothing else holds KV: the watermark protects no one
    fresh = live.phase == Phase.WAITING and not alone
    if fresh and need + int(WATERMARK * view.kv_capacity) > room:
        return 0
    return max(0, min(room, need))


def fill_token_budget(
    view: EngineView, queue: Iterable[LiveRequest], budget: int, skip_unfit: bool = False
) -> tuple[tuple[int, int], ...]:
    """Prefill chunks ``(rid, tokens)`` for a per-iteration token budget (vLLM's
    ``max_num_batched_tokens``): decodes take their tokens first, then prompts in
    ``queue`` order, several if needed. A prompt whose KV does not fit stops the fill
    (FCFS head-of-line, as vLLM) unless ``skip_unfit``, which moves on to the next."""
    left = budget - view.n_decode
    chunks: list[tuple[int, int]] = []
    taken = 0
    for live in queue:
        if left <= 0:
            break
        c = min(left, room_for(view, live, taken))
        if c <= 0:
            if skip_unfit:
                continue
            break
        chunks.append((live.rid, c))
        taken += c
        left -= c
    return tuple(chunks)
