"""One replica of a cluster: an :class:`~servecal.sched.engine.Engine` fed online.

A single engine is given all its requests up front. A replica is given them one at a
time, as the router sends them, in arrival order, so its queue of future arrivals
(``state.requests`` past the engine's cursor) is only ever what has already been
routed to it. Two things follow, and :class:`ReplicaEngine` handles both:

* a replica with nothing to do and nothing routed is not stepped (an engine would
  end its run); the cluster steps it again once a request arrives;
* a plan that runs nothing makes an engine wait for its next arrival. A replica does
  not know its next arrival, only the cluster's (``next_arrival_ms``), so it waits for
  that one and plans again then. With one replica the two are the same arrival, which
  is why a 1-replica cluster runs exactly the engine's iterations.

:class:`Replica` also keeps the load figures routers read as plain attributes, kept
current by the cluster: ``outstanding`` and ``queued_prompt_tokens`` move by the
request at :meth:`Replica.add` and are re-read from the engine by :meth:`Replica.sync`
after the replica steps (once per stepping, not per router read: a load-aware router
reads every replica at every arrival, the replicas step far less often). A sync is
O(1): it reads the engine's running counters (``state.prefill_tokens``, the prompt
tokens its iterations prefilled; ``clock.last_iter``), never its iteration rows, so a
replica works the same whether the engine keeps its rows in memory or streams them.
"""

from __future__ import annotations

from typing import Any

from servecal.sched.engine import Engine, EngineConfig, block_keys
from servecal.sched.prefix_cache import PrefixCacheConfig
from servecal.sched.request import Request


class ReplicaEngine(Engine):
    """An engine whose arrivals are appended while it runs (see the module docstring)."""

    #: The cluster's next arrival (ms), while the cluster steps this replica towards it;
    #: ``None`` once every request is routed.
    next_arrival_ms: float | None = None

    def add(self, request: Request) -> None:
        """Route ``request`` here: it arrives no earlier than any routed before it."""
        pending = self.state.requests
        if pending and request.arrival_ms < pending[-1].arrival_ms:
            raise ValueError("requests must be routed in arrival order")
        pending.append(request)
        config = self._config.prefix_cache
        if config is not None and request.block_ids:
            self._keys.update(block_keys([request], config))

    def has_work(self) -> bool:
        """Something runs, waits, or is routed here and not yet admitted."""
        s = self.state
        return bool(s.running or s.waiting) or self._next < len(s.requests)

    def _idle(self) -> bool:
        s = self.state
        nxt = self.next_arrival_ms
        if self._next >= len(s.requests) and nxt is not None and (s.running or s.waiting):
            s.now_ms = max(s.now_ms, nxt)  # wait for the cluster's next arrival
            return True
        return super()._idle()


class Replica:
    """One engine of a cluster and what a router may read about it.

    ``index``, ``name`` (its device label), ``predictor`` (its cost table), ``engine``;
    load, as of the replica's last step or routed request: ``outstanding`` (routed and
    not finished or rejected), ``queued_prompt_tokens`` (prompt tokens routed and not
    yet prefilled or served by its prefix cache; recompute preemptions re-prefill and
    are not counted), ``steps``
    (iterations run: a router may cache what it derived from a replica while this
    and ``outstanding`` stay put); read from the engine: ``n_decode``, ``ctx_mean``,
    ``now_ms``, ``kv_capacity``, ``kv_used``. The built-in routers' sort keys, kept with
    the load: ``by_requests`` = ``(outstanding, index)``, ``by_tokens`` =
    ``(queued_prompt_tokens, outstanding, index)`` (built once per change, not once
    per replica per arrival: ``min`` over 64 replicas then reads one attribute each).
    """

    __slots__ = ("index", "name", "engine", "predictor", "outstanding", "queued_prompt_tokens",
                 "steps", "by_requests", "by_tokens", "_routed_prompt")  # fmt: skip

    def __init__(self, index: int, name: str, engine: ReplicaEngine) -> None:
        self.index = index
        self.name = name
        self.engine = engine
        self.predictor: Any = engine.predictor
        self._routed_prompt = 0
        self.steps = 0
        self.outstanding = 0
        self.queued_prompt_tokens = 0
        self.sync()

    # -- what the cluster does --------------------------------------------------------
    def add(self, request: Request) -> None:
        self.engine.add(request)
        self._routed_prompt += request.prompt_tokens
        self.outstanding = outstanding = self.outstanding + 1
        # what the prefix cache served is subtracted at the next sync only (as before)
        prefilled = self.engine.state.prefill_tokens
        self.queued_prompt_tokens = queued = max(0, self._routed_prompt - prefilled)
        self.by_requests = (outstanding, self.index)
        self.by_tokens = (queued, outstanding, self.index)

    def sync(self) -> None:
        """Re-read the load figures from the engine's counters (after it stepped): O(1)."""
        engine = self.engine
        s = engine.state
        self.steps = s.clock.last_iter + 1
        outstanding = len(s.running) + len(s.waiting) + len(s.requests) - engine._next
        # prompt tokens a prefix cache served are never prefilled: not queued either
        served = s.prefill_tokens + s.prefix_served
        queued = max(0, self._routed_prompt - served)
        self.outstanding, self.queued_prompt_tokens = outstanding, queued
        self.by_requests = (outstanding, self.index)
        self.by_tokens = (queued, outstanding, self.index)

    def advance_to(self, t_ms: float) -> None:
        """Run iterations that start before ``t_ms`` (an arrival then sees this state)."""
        engine = self.engine
        engine.next_arrival_ms = t_ms
        state = engine.state
        step, has_work = engine.step, engine.has_work
        while state.now_ms < t_ms and has_work():
            step()
        self.sync()

    def finish(self) -> None:
        """Run to the end: every request is routed."""
        engine = self.engine
        engine.next_arrival_ms = None
        step = engine.step
        while step():  # False once nothing runs, waits or is routed here (has_work)
            pass
        self.sync()

    # -- what a router reads besides the load -----------------------------------------
    @property
    def n_decode(self) -> int:
        return self.engine.state.n_ready

    @property
    def ctx_mean(self) -> float:
        s = self.engine.state
        return s.kv_ready / s.n_ready if s.n_ready else 0.0

    @property
    def now_ms(self) -> float:
        return self.engine.state.now_ms

    @property
    def kv_capacity(self) -> int:
        return self.engine.state.kv_capacity

    @property
    def kv_used(self) -> int:
        return self.engine.state.kv_used


def replica_engine(
    policy: Any,
    predictor: Any,
    executor: Any,
    kv_capacity: int,
    policy_name: str,
    observers: tuple[Any, ...] = (),
    prefix_cache: PrefixCacheConfig | None = None,
    speculative: Any = None,
) -> ReplicaEngine:
    """An empty replica engine (requests come from the router), with its own prefix
    cache when ``prefix_cache`` is given; ``speculative``: a
    :class:`~servecal.sched.speculative.SpeculativeConfig` or ``None``."""
    return ReplicaEngine(
        [],
        policy,
        predictor,
        executor,
        EngineConfig(kv_capacity=kv_capacity, prefix_cache=prefix_cache, speculative=speculative),
        observers=observers,
        policy_name=policy_name,
    )
