"""The read-only view of the engine a policy plans from.

It reads the engine's :class:`~servecal.sched.state.EngineState` and changes
nothing. Every accessor is O(1) or returns a live read-only container view (no
copies), so reading the view costs nothing per iteration. Requests are
:class:`~servecal.sched.live.RequestView` objects whose attributes are all
read-only properties.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, ValuesView

from servecal.sched.live import RequestView
from servecal.sched.state import EngineState


class EngineView:
    """What a policy may read. It never changes engine state."""

    __slots__ = ("_s",)

    def __init__(self, state: EngineState) -> None:
        self._s = state

    # -- time and memory ------------------------------------------------------------
    @property
    def now_ms(self) -> float:
        """Scheduler time ``s_t``: the end of the previous iteration (or an arrival)."""
        return self._s.now_ms

    @property
    def kv_capacity(self) -> int:
        """``M``: KV cache capacity in tokens."""
        return self._s.kv_capacity

    @property
    def kv_used(self) -> int:
        return self._s.kv_used

    @property
    def prefill_room(self) -> int:
        """KV tokens a prefill may add this iteration, after every ready request's decode."""
        s = self._s
        return s.kv_capacity - s.kv_used - s.n_ready

    # -- requests -------------------------------------------------------------------
    @property
    def n_decode(self) -> int:
        """Requests whose prefill is done (each decodes one token per iteration)."""
        return self._s.n_ready

    @property
    def ctx_mean(self) -> float:
        """Mean KV length of the ready requests (the ``ctx`` of a decode-all iteration)."""
        s = self._s
        return s.kv_ready / s.n_ready if s.n_ready else 0.0

    @property
    def waiting(self) -> ValuesView[RequestView]:
        """Requests not started (or preempted), in arrival order, preempted ones first."""
        return self._s.waiting.values()

    @property
    def running(self) -> ValuesView[RequestView]:
        """Requests holding KV (prefilling or decoding), in admission order."""
        return self._s.running.values()

    @property
    def prefilling(self) -> ValuesView[RequestView]:
        """Running requests whose prefill is incomplete, in admission order."""
        return self._s.prefilling.values()

    @property
    def ready(self) -> ValuesView[RequestView]:
        """Running requests that decode."""
        return self._s.ready.values()

    def get(self, rid: int) -> RequestView:
        """Any request that has arrived, by id."""
        return self._s.live[rid]

    def next_prefill(self) -> RequestView | None:
        """The oldest incomplete prefill: a started one first, else the head of the queue."""
        s = self._s
        for live in s.prefilling.values():
            return live
        for live in s.waiting.values():
            return live
        return None

    def prefill_queue(self) -> Iterator[RequestView]:
        """Every incomplete prefill, started ones first (admission order), then waiting."""
        yield from self._s.prefilling.values()
        yield from self._s.waiting.values()

    # -- deadlines ------------------------------------------------------------------
    def earliest_deadline_ms(self) -> float:
        """``min_i d_i`` over the ready requests (``inf`` if none), in O(1).

        Requests that decoded in the last iteration share ``ℓ_i`` (its end), so the
        engine keeps them in a heap on ``D_i``, the others in a heap on ``d_i``, and
        keeps both tops valid: this only peeks (the same as
        :meth:`EngineState.earliest_deadline_ms`, written out here because SLOWeave
        asks every iteration).
        """
        s = self._s
        best = s.clock.ends[-1] + s.sync_heap[0][0] if s.sync_heap else math.inf
        if s.lag_heap and s.lag_heap[0][0] < best:
            return s.lag_heap[0][0]
        return best

    # -- events since the previous plan (for event-driven policies) -----------------
    @property
    def new_arrivals(self) -> tuple[int, ...]:
        """Ids that arrived since the previous ``plan`` call."""
        return tuple(self._s.arrived)

    @property
    def new_prefills_done(self) -> tuple[int, ...]:
        """Ids whose prefill completed since the previous ``plan`` call."""
        return tuple(self._s.prefilled)

    @property
    def new_finished(self) -> tuple[int, ...]:
        """Ids that finished since the previous ``plan`` call."""
        return tuple(self._s.finished)

    @property
    def iterations(self) -> int:
        """Iterations run so far."""
        return self._s.clock.last_iter + 1
