"""Helpers shared by the policies."""

from __future__ import annotations

from servecal.sched.live import Phase, RequestView
from servecal.sched.view import EngineView

#: Fraction of ``M`` kept free when a new request is admitted (vLLM's watermark).
WATERMARK = 0.01


def room_for(view: EngineView, live: RequestView, taken: int = 0) -> int:
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
