"""The read-only view of the engine a policy plans from.

Every accessor is O(1) or returns a live read-only container view (no copies), so
reading the view costs nothing per iteration. Requests are
:class:`~servecal.sched.live.LiveRequest` objects whose public attributes are
read-only properties.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, ValuesView
from heapq import heappop
from typing import TYPE_CHECKING

from servecal.sched.live import LiveRequest

if TYPE_CHECKING:
    from servecal.sched.engine import Engine


class EngineView:
    """What a policy may read. It never changes engine state."""

    __slots__ = ("_e",)

    def __init__(self, engine: Engine) -> None:
        self._e = engine

    # -- time and memory ------------------------------------------------------------
    @property
    def now_ms(self) -> float:
        """Scheduler time ``s_t``: the end of the previous iteration (or an arrival)."""
        return self._e._now

    @property
    def kv_capacity(self) -> int:
        """``M``: KV cache capacity in tokens."""
        return self._e._M

    @property
    def kv_used(self) -> int:
        return self._e._kv_used

    @property
    def prefill_room(self) -> int:
        """KV tokens a prefill may add this iteration, after every ready request's decode."""
        e = self._e
        return e._M - e._kv_used - e._n_ready

    # -- requests -------------------------------------------------------------------
    @property
    def n_decode(self) -> int:
        """Requests whose prefill is done (each decodes one token per iteration)."""
        return self._e._n_ready

    @property
    def ctx_mean(self) -> float:
        """Mean KV length of the ready requests (the ``ctx`` of a decode-all iteration)."""
        e = self._e
        return e._kv_ready / e._n_ready if e._n_ready else 0.0

    @property
    def waiting(self) -> ValuesView[LiveRequest]:
        """Requests not started (or preempted), in arrival order, preempted ones first."""
        return self._e._waiting.values()

    @property
    def running(self) -> ValuesView[LiveRequest]:
        """Requests holding KV (prefilling or decoding), in admission order."""
        return self._e._running.values()

    @property
    def prefilling(self) -> ValuesView[LiveRequest]:
        """Running requests whose prefill is incomplete, in admission order."""
        return self._e._prefilling.values()

    @property
    def ready(self) -> ValuesView[LiveRequest]:
        """Running requests that decode."""
        return self._e._ready.values()

    def get(self, rid: int) -> LiveRequest:
        """Any request that has arrived, by id."""
        return self._e._live[rid]

    def next_prefill(self) -> LiveRequest | None:
        """The oldest incomplete prefill: a started one first, else the head of the queue."""
        e = self._e
        for live in e._prefilling.values():
            return live
        for live in e._waiting.values():
            return live
        return None

    def prefill_queue(self) -> Iterator[LiveRequest]:
        """Every incomplete prefill, started ones first (admission order), then waiting."""
        yield from self._e._prefilling.values()
        yield from self._e._waiting.values()

    # -- deadlines ------------------------------------------------------------------
    def earliest_deadline_ms(self) -> float:
        """``min_i d_i`` over the ready requests (``inf`` if none); O(log n) amortised.

        Requests that decoded in the last iteration share ``ℓ_i`` (its end), so the
        engine keeps them in a heap on ``D_i``; the others in a heap on ``d_i``. Stale
        heap entries are dropped lazily here.
        """
        e = self._e
        ready = e._ready
        best = math.inf
        heap = e._sync_heap
        while heap:
            slo, rid, hv = heap[0]
            live = ready.get(rid)
            if live is not None and live._hv == hv:
                best = e._clock.ends[-1] + slo
                break
            heappop(heap)
        heap = e._lag_heap
        while heap:
            d, rid, hv = heap[0]
            live = ready.get(rid)
            if live is not None and live._hv == hv:
                return min(best, d)
            heappop(heap)
        return best

    # -- events since the previous plan (for event-driven policies) -----------------
    @property
    def new_arrivals(self) -> tuple[int, ...]:
        """Ids that arrived since the previous ``plan`` call."""
        return tuple(self._e._ev_arrivals)

    @property
    def new_prefills_done(self) -> tuple[int, ...]:
        """Ids whose prefill completed since the previous ``plan`` call."""
        return tuple(self._e._ev_prefilled)

    @property
    def new_finished(self) -> tuple[int, ...]:
        """Ids that finished since the previous ``plan`` call."""
        return tuple(self._e._ev_finished)

    @property
    def iterations(self) -> int:
        """Iterations run so far."""
        return self._e._clock.last_iter + 1
