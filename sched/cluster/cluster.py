"""A cluster run: replicas interleaved in time, one router decision per arrival.

For each request in arrival order, every replica first runs the iterations that start
before the arrival (so the router sees each replica as it is then: a replica may be
mid-iteration, its clock up to one iteration ahead), then the router picks one among
those the request may use and the request is appended to its queue. After the last
arrival every replica runs to the end. The work is the replicas' own iterations plus
one decision per request (benchmarks/cluster.py measures it).

A router that reads nothing of the replicas (``reads_replicas = False``: round-robin)
needs no interleaving: every request is routed at once and each replica then runs as
a plain engine with all its arrivals known, which is exactly what the replicas would
cost alone.

SLO-class routing (``groups``): a tier name maps to the replicas that serve it; a
request of class ``K`` or ``*-K`` (``chat-strict`` is tier ``strict``) is routed among
its tier's replicas only, any other request among all of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from heapq import heappop, heappush, heapreplace
from time import perf_counter_ns
from typing import Any

import numpy as np

from servecal.sched.cluster.replica import Replica
from servecal.sched.request import Request
from servecal.sched.result import RunResult


class Cluster:
    """``Cluster(requests, replicas, router, groups).run()`` → the merged :class:`RunResult`."""

    def __init__(
        self,
        requests: Sequence[Request],
        replicas: Sequence[Replica],
        router: Any,
        groups: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        if not replicas:
            raise ValueError("a cluster needs at least one replica")
        self.requests = sorted(requests, key=lambda r: (r.arrival_ms, r.rid))
        if len({r.rid for r in self.requests}) != len(self.requests):
            raise ValueError("request ids must be unique")
        self.replicas = list(replicas)
        self.router = router
        self.groups = {k: tuple(v) for k, v in (groups or {}).items()}
        for tier, members in self.groups.items():
            if not members or any(not 0 <= i < len(self.replicas) for i in members):
                raise ValueError(
                    f"tier {tier!r}: replica indices must be in 0..{len(replicas) - 1}"
                )
        self._choices: dict[str, tuple[list[Replica], frozenset[int]]] = {}
        self.route_ns: list[int] = []

    def _allowed(self, slo_class: str) -> tuple[list[Replica], frozenset[int]]:
        """The replicas a request of ``slo_class`` may use, and their indices."""
        found = self._choices.get(slo_class)
        if found is None:
            tier = next(
                (k for k in self.groups if slo_class == k or slo_class.endswith("-" + k)), None
            )
            members = self.groups[tier] if tier is not None else range(len(self.replicas))
            chosen = [self.replicas[i] for i in members]
            found = self._choices[slo_class] = (chosen, frozenset(r.index for r in chosen))
        return found

    def run(self) -> RunResult:
        replicas = self.replicas
        by_index = {r.index: r for r in replicas}
        position = {id(r): k for k, r in enumerate(replicas)}
        # the replicas with work, by clock: only those behind an arrival are stepped to
        # it (most are mid-iteration past it), so an arrival costs O(log N), not O(N)
        behind: list[tuple[float, int]] = []
        queued: set[int] = set()
        engines = [r.engine for r in replicas]
        oblivious = not getattr(self.router, "reads_replicas", True)
        syncs = [r.sync for r in replicas]
        for request in self.requests:
            t = request.arrival_ms
            while behind and behind[0][0] < t and not oblivious:
                k = behind[0][1]
                engine = engines[k]
                engine.next_arrival_ms = t
                state, step = engine.state, engine.step
                working = True
                while state.now_ms < t:  # Replica.advance_to, inlined: once per iteration
                    if not step():
                        working = False
                        break
                syncs[k]()
                if working:  # its new clock replaces its entry: one sift, not two
                    heapreplace(behind, (state.now_ms, k))
                else:
                    heappop(behind)
                    queued.discard(k)
            target = self._route(request, by_index)
            target.add(request)
            k = position[id(target)]
            if k not in queued:
                queued.add(k)
                heappush(behind, (target.now_ms, k))
        for r in replicas:
            r.finish()
        return merged_result([r.engine.result() for r in replicas], self.route_ns)

    def _route(self, request: Request, by_index: dict[int, Replica]) -> Replica:
        """The replica the router chooses for ``request`` among those its SLO class may
        use (the decision timed into ``route_ns``); a choice outside them is an error."""
        allowed, indices = self._allowed(request.slo_class)
        t0 = perf_counter_ns()
        chosen = self.router.route(request, allowed)
        self.route_ns.append(perf_counter_ns() - t0)
        if chosen not in indices:
            raise ValueError(
                f"router {type(self.router).__name__} chose replica {chosen!r} for request "
                f"{request.rid}, not one of {sorted(indices)}"
            )
        return by_index[chosen]


def merged_result(results: Sequence[RunResult], route_ns: Sequence[int] = ()) -> RunResult:
    """One run of the whole cluster: the replicas' requests (by id) and iterations, each
    row with its ``replica``; ``plan_calls`` summed; ``counters``: ``replicas``,
    ``route_us_median`` and the fewest and most requests any replica served."""
    req_parts = [r.request_columns for r in results]
    counts = [len(p["rid"]) for p in req_parts]
    requests = _concat(req_parts)
    requests["replica"] = np.repeat(np.arange(len(results)), counts)
    order = np.argsort(requests["rid"], kind="stable")
    requests = {k: v[order] for k, v in requests.items()}
    it_parts = [r.iteration_columns for r in results]
    iterations = _concat(it_parts)
    iterations["replica"] = np.repeat(
        np.arange(len(results)), [len(p["duration_ms"]) for p in it_parts]
    )
    sources = {r.energy_source for r in results}
    counters: dict[str, Any] = {
        "replicas": len(results),
        "route_us_median": float(np.median(route_ns)) / 1000.0 if len(route_ns) else None,
        "replica_requests_min": min(counts),
        "replica_requests_max": max(counts),
    }
    evictions = [r.counters["kv_evictions"] for r in results if "kv_evictions" in r.counters]
    if evictions:  # replicas with a prefix cache
        counters["kv_evictions"] = sum(evictions)
    return RunResult(
        request_columns=requests,
        iteration_columns=iterations,
        plan_calls=sum(r.plan_calls for r in results),
        energy_source=sources.pop() if len(sources) == 1 else "none",
        counters=counters,
    )


def _concat(parts: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    names = [k for k in parts[0] if all(k in p for p in parts)]
    return {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in names}
