"""The cheapest fleet that meets the target: few simulations, on any pool (docs/capacity.md).

For each candidate configuration (hardware, scheduling policy, router) the question
is the smallest replica count ``N`` whose attainment at the offered load meets the
target. Attainment does not fall when replicas are added (same requests, same seed,
more capacity), so ``N`` is found by bisection (:class:`ReplicaSearch`). Configurations
are searched cheapest replica first, and the cheapest fleet found so far bounds the
rest: a configuration is only tried up to the replica count that would still cost no
more (``floor(best / price)``), so one that cannot beat it costs one simulation (at
that count) and one already dearer costs none. Ties in cost are kept, so the answer
(the cheapest, ties broken by configuration order) does not depend on which
simulations finished first: a local pool and a Ray pool give the same answer. With
disaggregated candidates each mode is bounded by its own cheapest, so the cheapest
aggregated and the cheapest disaggregated fleet are both known; a configuration that
misses at a count settles the same count of its siblings on slower links.

The frontier (optional, and after the answer): the searches the bound cut short are
finished without it, so every configuration has its smallest ``N`` whatever order
simulations finished in, and each that meets the target within ``[lo, hi]`` gets its
maximum goodput at that ``N`` (the highest rate still meeting the target, by
:class:`~servecal.sched.experiment.goodput.GoodputSearch` from the offered rate up).
The Pareto set of cost against maximum goodput is the frontier.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import dataclass, field
from typing import Any

from servecal.sched.cluster.space import Hardware, Space
from servecal.sched.cluster.spec import ClusterSpec, ReplicaSpec
from servecal.sched.experiment.goodput import Bracket, GoodputSearch
from servecal.sched.experiment.sweep import PROBE_KEYS, Task, execute
from servecal.sched.policies.registry import PolicySpec

#: How finely the frontier's maximum goodput is searched (share of the failing rate).
FRONTIER_TOL = 0.05


@dataclass
class ReplicaSearch:
    """The smallest ``N`` in ``[lo, hi]`` meeting the target, never above ``cap`` (the cost
    bound): ``next_count(cap)`` → run → ``record(count, met)``.

    Attainment does not fall as replicas are added, so: the first probe at ``guess``
    (the count a sibling configuration on the same hardware needed, else ``lo``, or the
    cost bound ``cap`` when a cheaper fleet is already known); on a miss, double until a
    count meets the target (under a bound: go straight to the bound, where a miss ends
    the search); on a hit at the first probe, one below
    it (a sibling's count is usually right or one off); then bisect. Small fleets are
    cheap to simulate, so the search climbs from below rather than starting at ``hi``.
    """

    lo: int
    hi: int
    passed: int | None = None  # smallest N measured to meet the target
    failed: int = 0  # largest N measured to miss it (lo - 1 before any)
    probes: int = 0
    first: int | None = None  # the first count probed

    def __post_init__(self) -> None:
        self.failed = self.lo - 1

    def next_count(self, cap: int, guess: int | None = None) -> int | None:
        """The count to run next under the bound ``cap``, or ``None`` when done."""
        top = min(self.hi, cap)
        if self.passed is None:
            if top <= self.failed:
                return None
            bounded = top < self.hi  # a cheaper fleet is known: only a pass by ``top`` matters
            if self.probes == 0:
                return max(self.lo, min(top, guess or (top if bounded else self.lo)))
            if bounded:  # one probe at the bound: a miss there ends the search
                return top
            return min(top, max(self.failed + 1, 2 * self.failed))
        if self.passed > top:  # it meets the target, but no cheaper than the best found
            return None
        if self.passed - self.failed <= 1:
            return None
        if self.probes == 1 and self.passed == self.first:
            return self.passed - 1
        return (self.failed + self.passed) // 2

    def record(self, count: int, met: bool) -> None:
        if self.first is None:
            self.first = count
        self.probes += 1
        if met:
            self.passed = count if self.passed is None else min(self.passed, count)
        else:
            self.failed = max(self.failed, count)

    @property
    def done(self) -> bool:
        return self.passed is not None and self.passed - self.failed <= 1


@dataclass
class Config:
    """One candidate: ``hardware``, ``policy``, ``router``; what its search found."""

    index: int
    hardware: Hardware  # or a disaggregated PoolPair (its count is in units)
    policy: PolicySpec
    router: PolicySpec
    search: ReplicaSearch
    probes: list[dict[str, Any]] = field(default_factory=list)
    max_goodput: float | None = None
    goodput_bound: str | None = None
    to_answer: int = 0  # simulations this config took before the answer was known
    inferred: int = 0  # counts settled by a dominating sibling's miss, not simulated
    dominators: list[Config] = field(default_factory=list, repr=False, compare=False)

    @property
    def label(self) -> str:
        return f"{self.hardware.name} · {self.policy.label} · {self.router.label}"

    @property
    def replicas(self) -> int | None:
        return self.search.passed if self.search.done else None

    def cost(self, n: int | None = None) -> float:
        count = self.replicas if n is None else n
        return math.inf if count is None else count * self.hardware.price_per_hour


def cluster_spec(space: Space, config: Config, n: int, rate: float | None) -> ClusterSpec:
    h = config.hardware
    if getattr(h, "mode", None) == "disaggregated":  # n units of a pool pair
        from servecal.sched.cluster.disagg_space import disagg_spec

        return disagg_spec(space, h, config.policy, config.router, n, rate)
    replica = ReplicaSpec(config.policy, h.truth, h.predictor, h.kv_capacity, h.name, h.speculative)
    return ClusterSpec(
        space.workload,
        (replica,) * n,
        config.router,
        prefix_cache=space.prefix_cache,
        **space.fleet_workload(rate),
    )


@dataclass(frozen=True)
class PlanProgress:
    """After each simulation: ``done`` so far, the config, its replica count and rate."""

    done: int
    config: str
    replicas: int
    rate: float | None
    total: int | None = None  # unknown: bisections and pruning decide it as they go


class _Runner:
    """Runs probes (every seed of a spec) on a pool, at most ``width`` tasks in flight."""

    def __init__(self, pool: Executor, width: int, on_progress: Callable[..., None] | None):
        self.pool, self.width, self.on_progress = pool, max(1, width), on_progress
        self.pending: dict[Future, tuple[Any, int, int]] = {}
        self.partial: dict[Any, list[tuple[int, dict[str, Any]]]] = {}
        self.done = 0

    def submit(self, key: Any, spec: ClusterSpec) -> None:
        self.partial[key] = []
        for seed in spec.seeds:
            task = Task(spec, seed)
            self.pending[self.pool.submit(execute, task)] = (key, seed, len(spec.seeds))

    def room(self) -> bool:
        return len(self.pending) < self.width

    def finished(self) -> list[tuple[Any, list[dict[str, Any]]]]:
        """Wait for some tasks; the probes whose every seed is in."""
        if not self.pending:
            return []
        ready, _ = wait(self.pending, return_when=FIRST_COMPLETED)
        out = []
        for future in ready:
            key, seed, seeds = self.pending.pop(future)
            self.partial[key].append((seed, future.result()))
            self.done += 1
            if len(self.partial[key]) == seeds:  # in seed order: means do not depend on
                done = sorted(self.partial.pop(key), key=lambda x: x[0])  # arrival order
                out.append((key, [summary for _, summary in done]))
        return out

    def cancel(self) -> None:
        for future in self.pending:
            future.cancel()


def _probe_record(n: int, rate: float | None, summaries: list[dict[str, Any]]) -> dict[str, Any]:
    mean = {k: _mean([s.get(k) for s in summaries]) for k in PROBE_KEYS}
    return {"replicas": n, "rate": rate, **mean}


def _mean(values: list[Any]) -> float | None:
    present = [float(v) for v in values if v is not None]
    return sum(present) / len(present) if present else None


def candidates(space: Space) -> list[Config]:
    """Every configuration of ``space``, nothing measured yet, each with the siblings
    that dominate it (``hardware.dominates``: the same but a faster KV link)."""
    configs = [
        Config(i, h, p, r, ReplicaSearch(*space.replicas))
        for i, (h, p, r) in enumerate(space.configs)
    ]
    groups: dict[tuple[Any, ...], list[Config]] = {}
    for c in configs:
        if hasattr(c.hardware, "dominates"):
            groups.setdefault((c.policy, c.router), []).append(c)
    for group in groups.values():
        for c in group:
            c.dominators = [o for o in group if o.hardware.dominates(c.hardware)]
    return configs


def _settled(config: Config, n: int) -> bool:
    """``n`` misses the target: a dominating sibling missed it at ``n`` or more."""
    return any(o.search.failed >= n for o in config.dominators)


def plan(
    space: Space,
    pool: Executor,
    width: int,
    on_progress: Callable[[PlanProgress], None] | None = None,
    frontier: bool = True,
    configs: list[Config] | None = None,
) -> list[Config]:
    """Search every configuration of ``space`` (see the module docstring). ``configs``
    (from :func:`candidates`) is filled in place, so a caller interrupted mid-search
    still holds every simulation that finished."""
    configs = candidates(space) if configs is None else configs
    runner = _Runner(pool, width, on_progress)
    try:
        _search_counts(space, configs, runner, prune=True)
        for c in configs:
            c.to_answer = c.search.probes - c.inferred
        if frontier:
            _search_counts(space, configs, runner, prune=False)
            _search_goodput(space, configs, runner, base_rate(space))
    except BaseException:
        runner.cancel()
        raise
    return configs


def best_cost(configs: list[Config]) -> float:
    return min((c.cost() for c in configs), default=math.inf)


def mode(config: Config) -> str:
    """``aggregated`` or ``disaggregated`` (a pool pair's configurations)."""
    return getattr(config.hardware, "mode", "aggregated")


def _best_by_mode(configs: list[Config]) -> dict[str, float]:
    best: dict[str, float] = {}
    for c in configs:
        cost = c.cost()
        if cost < best.get(mode(c), math.inf):
            best[mode(c)] = cost
    return best


def _cap(config: Config, best: float) -> int:
    if math.isinf(best):
        return config.search.hi
    return int(math.floor(best / config.hardware.price_per_hour * (1 + 1e-12)))


def _guess(configs: list[Config], config: Config) -> int | None:
    """The fewest replicas a configuration on the same hardware was measured to need."""
    counts = [c.search.passed for c in configs
              if c.hardware == config.hardware and c.search.passed is not None]  # fmt: skip
    return min(counts) if counts else None


def _search_counts(space: Space, configs: list[Config], runner: _Runner, prune: bool) -> None:
    busy: set[int] = set()
    while True:
        # each mode (aggregated, disaggregated) is bounded by its own cheapest, so the
        # answer names the cheapest of each (a space of one mode: the plain bound)
        best = _best_by_mode(configs) if prune else {}
        for c in configs:
            if not runner.room():
                break
            if c.index in busy or any(o.index in busy for o in c.dominators):
                continue  # a dominating sibling's probe may settle this one's
            cap = _cap(c, best.get(mode(c), math.inf))
            n = c.search.next_count(cap, _guess(configs, c))
            while n is not None and _settled(c, n):
                c.search.record(n, False)
                c.inferred += 1
                c.probes.append({"replicas": n, "rate": space.rate, "inferred": True})
                n = c.search.next_count(cap, _guess(configs, c))
            if n is not None:
                busy.add(c.index)
                runner.submit((c.index, n), cluster_spec(space, c, n, space.rate))
        if not runner.pending:
            return
        for (i, n), summaries in runner.finished():
            c = configs[i]
            record = _probe_record(n, space.rate, summaries)
            c.probes.append(record)
            c.search.record(n, record["attainment"] >= space.target)
            busy.discard(i)
            if runner.on_progress is not None:
                runner.on_progress(PlanProgress(runner.done, c.label, n, space.rate))


def base_rate(space: Space) -> float:
    """The offered rate in req/s: the plan's, or the trace window's own mean rate."""
    if space.rate is not None:
        return space.rate
    from servecal.sched.experiment.run import requests_for

    probe = cluster_spec(space, Config(0, space.hardware[0], space.policies[0],
                                       space.routers[0], ReplicaSearch(1, 1)), 1, None)  # fmt: skip
    arrivals = [r.arrival_ms for r in requests_for(probe, space.seeds[0])]  # type: ignore[arg-type]
    span_s = (max(arrivals) - min(arrivals)) / 1000.0
    return (len(arrivals) - 1) / span_s if span_s > 0 else 1.0


def _search_goodput(space: Space, configs: list[Config], runner: _Runner, rate: float) -> None:
    found = [c for c in configs if c.replicas is not None]
    bracket = Bracket(rate, 2 * rate, target=space.target, rel_tol=FRONTIER_TOL)
    searches = {c.index: GoodputSearch(bracket) for c in found}
    # the offered rate is already measured to meet the target at this count
    for c in found:
        searches[c.index].good = rate
    busy: set[int] = set()
    while True:
        for c in found:
            if not runner.room():
                break
            if c.index in busy:
                continue
            r = searches[c.index].next_rate()
            if r is not None:
                busy.add(c.index)
                spec = cluster_spec(space, c, c.replicas, r)  # type: ignore[arg-type]
                runner.submit((c.index, r), spec)
        if not runner.pending:
            break
        for (i, r), summaries in runner.finished():
            c = configs[i]
            record = _probe_record(c.replicas, r, summaries)  # type: ignore[arg-type]
            record["frontier"] = True
            c.probes.append(record)
            searches[i].record(record["attainment"])
            busy.discard(i)
            if runner.on_progress is not None:
                runner.on_progress(PlanProgress(runner.done, c.label, c.replicas, r))  # type: ignore[arg-type]
    for c in found:
        result = searches[c.index].result
        c.max_goodput, c.goodput_bound = result.rate, result.bound


def pareto(configs: list[Config]) -> list[Config]:
    """The configurations no other beats on both cost (lower) and max goodput (higher)."""
    points = [c for c in configs if c.replicas is not None and c.max_goodput is not None]
    out = []
    for c in points:
        dominated = any(
            o is not c
            and o.cost() <= c.cost()
            and o.max_goodput >= c.max_goodput  # type: ignore[operator]
            and (o.cost() < c.cost() or o.max_goodput > c.max_goodput)  # type: ignore[operator]
            for o in points
        )
        if not dominated:
            out.append(c)
    return sorted(out, key=lambda c: (c.cost(), c.index))


def answer(configs: list[Config]) -> Config | None:
    """The cheapest configuration that met the target (ties: configuration order)."""
    found = [c for c in configs if c.replicas is not None]
    return min(found, key=lambda c: (c.cost(), c.index)) if found else None
