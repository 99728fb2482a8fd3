"""What the engine knows during a run, in one object the engine alone writes.

:class:`EngineState` holds the clock, KV accounting, the request sets and the
events since the previous plan. :class:`~servecal.sched.engine.Engine` is its only
writer; the policy's :class:`~servecal.sched.view.EngineView`, the plan checks
(:mod:`servecal.sched.plan_check`) and the result builder
(:mod:`servecal.sched.result`) read it. The fields are plain attributes (no
properties) because policies read some of them every iteration and the engine
aims at ≥ 50,000 iterations/s.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from servecal.sched.live import Clock, LiveRequest
from servecal.sched.request import Request


class EngineState:
    """The engine's state (see the module docstring). Read-only outside the engine.

    * ``requests``: every request of the run, by arrival (then id);
    * ``live``: the arrived ones by id; ``waiting`` (queue order, recomputed ones
      first), ``running`` (hold KV, admission order), ``prefilling`` and ``ready``
      (the running ones whose prefill is incomplete / done), ``parked_ready``;
    * ``now_ms``, ``kv_capacity`` (``M``), ``kv_used``, ``kv_ready`` (KV held by the
      ready requests), ``n_ready``; ``clock`` (iteration end times);
    * ``arrived``, ``prefilled``, ``finished``: ids since the previous plan;
    * ``recomputes`` (recompute preemptions so far), ``plan_calls``;
      ``prefix_served``: prefill tokens the prefix cache served so far (queued
      requests' pinned hits included); ``prefill_tokens``: prompt tokens prefilled by
      the iterations so far (their chunks summed: what a cluster's router reads as a
      replica's progress without keeping the iteration rows);
    * ``sync_heap`` / ``lag_heap``: next-token deadlines of the ready requests that
      decoded in the last iteration (``(D_i, rid, version)``: their ``ℓ_i`` is its
      end) and of the others (``(d_i, rid, version)``). The engine drops stale
      entries from their tops before each plan, so a reader only peeks.
    """

    __slots__ = (
        "requests",
        "live",
        "waiting",
        "running",
        "prefilling",
        "ready",
        "parked_ready",
        "now_ms",
        "kv_capacity",
        "kv_used",
        "kv_ready",
        "n_ready",
        "clock",
        "arrived",
        "prefilled",
        "finished",
        "recomputes",
        "prefix_served",
        "prefill_tokens",
        "plan_calls",
        "sync_heap",
        "lag_heap",
    )

    def __init__(self, requests: list[Request], kv_capacity: int) -> None:
        self.requests = requests
        self.live: dict[int, LiveRequest] = {}
        self.waiting: OrderedDict[int, LiveRequest] = OrderedDict()
        self.running: dict[int, LiveRequest] = {}
        self.prefilling: dict[int, LiveRequest] = {}
        self.ready: dict[int, LiveRequest] = {}
        self.parked_ready: dict[int, LiveRequest] = {}
        self.now_ms = requests[0].arrival_ms if requests else 0.0
        self.kv_capacity = kv_capacity
        self.kv_used = 0
        self.kv_ready = 0
        self.n_ready = 0
        self.clock = Clock()
        self.arrived: list[int] = []
        self.prefilled: list[int] = []
        self.finished: list[int] = []
        self.recomputes = 0
        self.prefix_served = 0
        self.prefill_tokens = 0
        self.plan_calls = 0
        self.sync_heap: list[tuple[float, int, int]] = []
        self.lag_heap: list[tuple[float, int, int]] = []

    def earliest_deadline_ms(self) -> float:
        """``min_i d_i`` over the ready requests (``inf`` if none): a peek at the heaps,
        whose tops the engine keeps valid."""
        best = math.inf
        if self.sync_heap:
            best = self.clock.ends[-1] + self.sync_heap[0][0]
        if self.lag_heap:
            d = self.lag_heap[0][0]
            if d < best:
                return d
        return best
