"""The cluster simulator: one replica is the engine, routers route, tiers hold."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

from servecal.costmodels import InputError
from servecal.sched.cluster import ClusterSpec, ReplicaSpec
from servecal.sched.experiment import Bracket, RunSpec, run, summarize, sweep
from servecal.sched.policies.registry import PolicySpec


def _cluster(n: int, router: str = "round-robin", policy: str = "sloweave", **kw) -> ClusterSpec:
    replicas = tuple(ReplicaSpec(PolicySpec(policy)) for _ in range(n))
    kw.setdefault("rate", 60.0)
    return ClusterSpec("mixed", replicas, PolicySpec(router), tpot_slo_ms=25, n_requests=600, **kw)


@pytest.mark.parametrize("policy", ["sloweave", "fixed-512"])
def test_one_replica_cluster_is_exactly_the_engine_run(policy):
    engine = run(RunSpec("mixed", PolicySpec(policy), tpot_slo_ms=25, rate=40, n_requests=600), 3)
    cluster = run(_cluster(1, policy=policy, rate=40), 3)
    a, b = engine.request_columns, cluster.request_columns
    for name, column in a.items():
        assert (
            np.array_equal(column, b[name])
            if column.dtype == object
            else np.array_equal(column, b[name], equal_nan=True)
        ), name
    assert (b["replica"] == 0).all()
    ia, ib = engine.iteration_columns, cluster.iteration_columns
    assert len(ia["duration_ms"]) > 1000
    for name, column in ia.items():
        if name != "decision_us":  # wall-clock time of each decision
            assert np.array_equal(column, ib[name], equal_nan=True), name
    assert engine.plan_calls == cluster.plan_calls


def test_round_robin_spreads_requests_evenly_and_every_request_is_served_once():
    result = run(_cluster(3), 0)
    cols = result.request_columns
    assert np.bincount(cols["replica"]).tolist() == [200, 200, 200]
    assert sorted(cols["rid"].tolist()) == list(range(600))
    assert result.counters["replicas"] == 3


def test_more_replicas_serve_more_of_an_overload():
    one = summarize(_cluster(1), run(_cluster(1, rate=150), 0))
    four = summarize(_cluster(4), run(_cluster(4, rate=150), 0))
    assert one["attainment"] < 0.5 < 0.95 < four["attainment"]


@pytest.mark.parametrize("router", ["least-requests", "least-tokens", "predicted-latency"])
def test_load_aware_routers_balance_a_fleet(router):
    result = run(_cluster(4, router, rate=150), 1)
    counts = np.bincount(result.request_columns["replica"], minlength=4)
    assert counts.min() > 0.15 * 600
    assert summarize(_cluster(4), result)["attainment"] > 0.9


def test_predicted_latency_prefers_the_replica_with_headroom():
    from servecal.sched.cluster.replica import Replica
    from servecal.sched.cluster.routers import PredictedLatency
    from servecal.sched.cluster.spec import build_cluster
    from servecal.sched.request import Request

    replicas, _ = build_cluster(_cluster(2), np.random.default_rng(0))
    busy: Replica = replicas[0]
    for rid in range(40):  # a queue of long prompts on replica 0
        busy.add(Request(rid, 0.0, 3000, 50, ttft_slo_ms=2000.0, tpot_slo_ms=25.0))
    router = PredictedLatency()
    newcomer = Request(99, 0.0, 256, 50, ttft_slo_ms=628.0, tpot_slo_ms=25.0)
    ttft_busy, _ = router.predict(newcomer, busy)
    ttft_idle, _ = router.predict(newcomer, replicas[1])
    assert ttft_busy > 628.0 > ttft_idle
    assert router.route(newcomer, replicas) == 1


def test_slo_class_routing_keeps_each_tier_on_its_replicas():
    spec = ClusterSpec(
        "tenants",
        tuple(ReplicaSpec(PolicySpec("sloweave")) for _ in range(3)),
        PolicySpec("least-requests"),
        groups=(("strict", (0,)), ("standard", (1,)), ("relaxed", (2,))),
        tpot_slo_ms=25,
        rate=30,
        n_requests=600,
    )
    cols = run(spec, 0).request_columns
    for tier, replica in (("strict", 0), ("standard", 1), ("relaxed", 2)):
        mine = np.array([c.endswith("-" + tier) for c in cols["slo_class"]])
        assert mine.sum() > 100
        assert (cols["replica"][mine] == replica).all()


def test_a_user_router_loads_by_import_path(tmp_path, monkeypatch):
    (tmp_path / "my_router.py").write_text(
        textwrap.dedent(
            """
            class LastOne:
                def route(self, request, replicas):
                    return replicas[-1].index

            class Stray:
                def route(self, request, replicas):
                    return 7
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        cols = run(_cluster(3, "my_router:LastOne"), 0).request_columns
        assert (cols["replica"] == 2).all()
        with pytest.raises(ValueError, match="chose replica 7"):
            run(_cluster(2, "my_router:Stray"), 0)
    finally:
        sys.modules.pop("my_router", None)


def test_a_scheduling_policy_is_not_a_router():
    with pytest.raises(InputError, match="not on the router"):
        run(_cluster(2, "sloweave"), 0)


def test_cluster_specs_run_through_sweep_with_a_max_goodput_search():
    spec = _cluster(2)
    [outcome] = sweep([spec], goodput=Bracket(40, 160, rel_tol=0.1), jobs=1)
    rate = outcome.mean["max_goodput"]
    assert outcome.mean["max_goodput_bound"] == "measured"
    assert 40 < rate < 400


@pytest.mark.parametrize("router", ["round-robin", "predicted-latency"])
def test_stepping_only_the_replicas_behind_an_arrival_changes_nothing(router):
    """The cluster steps only replicas whose clock is behind an arrival; stepping every
    replica to every arrival (the definition) gives the same run."""
    from servecal.sched.cluster.cluster import Cluster, merged_result
    from servecal.sched.cluster.spec import build_cluster
    from servecal.sched.experiment.run import requests_for

    class EveryReplica(Cluster):
        def run(self):
            for request in self.requests:
                for r in self.replicas:
                    r.advance_to(request.arrival_ms)
                self.replicas[self.router.route(request, self.replicas)].add(request)
            for r in self.replicas:
                r.finish()
            return merged_result([r.engine.result() for r in self.replicas])

    spec = _cluster(4, router, rate=200)
    requests = requests_for(spec, 0)  # type: ignore[arg-type]
    stream = np.random.SeedSequence(0).spawn(2)[1]
    fast = Cluster(requests, *build_cluster(spec, np.random.default_rng(stream))).run()
    slow = EveryReplica(requests, *build_cluster(spec, np.random.default_rng(stream))).run()
    for name, column in fast.request_columns.items():
        other = slow.request_columns[name]
        assert (
            (column == other).all()
            if column.dtype == object
            else np.array_equal(column, other, equal_nan=True)
        ), name


@pytest.mark.parametrize("router", ["least-tokens", "predicted-latency"])
def test_the_load_a_router_reads_is_the_engines_at_every_arrival(router):
    """Replicas keep ``outstanding`` and ``queued_prompt_tokens`` (and the routers' keys
    built from them) as counters (moved at routing, re-read from the engine's counters
    after stepping): at every decision they equal what the engine's iteration rows say,
    and a predicted-latency router with its per-replica cache routes exactly as one
    that predicts everything afresh."""
    from servecal.sched.cluster.cluster import Cluster
    from servecal.sched.cluster.routers import PredictedLatency
    from servecal.sched.cluster.spec import build_cluster
    from servecal.sched.experiment.run import requests_for

    checked = []

    class Checking:
        def __init__(self, inner):
            self.inner = inner

        def route(self, request, replicas):
            for r in replicas:
                e, s = r.engine, r.engine.state
                assert r.outstanding == len(s.running) + len(s.waiting) + len(s.requests) - e._next
                prefilled = sum(row[3] for row in e.log.rows)
                assert s.prefill_tokens == prefilled  # the engine's counter, not its rows
                assert r.queued_prompt_tokens == max(0, r._routed_prompt - prefilled)
                assert r.steps == len(e.log.rows)
                assert r.by_requests == (r.outstanding, r.index)
                assert r.by_tokens == (r.queued_prompt_tokens, r.outstanding, r.index)
            checked.append(request.rid)
            if isinstance(self.inner, PredictedLatency):
                fresh = PredictedLatency(**{k: getattr(self.inner, k) for k in
                                            ("chunk", "quantile", "use_margin")})  # fmt: skip
                expected = fresh.route(request, replicas)
                assert self.inner.route(request, replicas) == expected
                return expected
            return self.inner.route(request, replicas)

    spec = _cluster(4, router, rate=600)  # overloaded: the router tries several replicas
    requests = requests_for(spec, 0)  # type: ignore[arg-type]
    replicas, inner = build_cluster(spec, np.random.default_rng(0))
    Cluster(requests, replicas, Checking(inner)).run()
    assert len(checked) == 600
    if router == "predicted-latency":
        assert inner._ttft and inner._tpot  # the cache was used


@pytest.mark.parametrize("router", ["least-tokens", "predicted-latency", "prefix-affinity"])
def test_routing_never_reads_the_engines_iteration_rows(router):
    """What routers read comes from the engines' counters, not ``engine.log.rows``: a
    cluster runs the same whether its engines keep their rows or stream them away."""
    from servecal.sched.cluster.cluster import Cluster
    from servecal.sched.cluster.spec import build_cluster
    from servecal.sched.experiment.run import requests_for

    reads = []

    class Rows(list):  # appends as a list; every read before the results is counted
        def __len__(self):
            reads.append("len")
            return super().__len__()

        def __getitem__(self, key):
            reads.append("item")
            return super().__getitem__(key)

        def __iter__(self):
            reads.append("iter")
            return super().__iter__()

    workload = "chat+prefix" if router == "prefix-affinity" else "mixed"
    spec = ClusterSpec(workload, (ReplicaSpec(PolicySpec("sloweave")),) * 4, PolicySpec(router),
                       tpot_slo_ms=50, rate=120, n_requests=300)  # fmt: skip
    replicas, inner = build_cluster(spec, np.random.default_rng(0))
    for r in replicas:
        r.engine.log.rows = Rows()
        r.engine._record = r.engine.log.rows.append

    routed = []

    class Watching:
        def route(self, request, allowed):
            assert not reads, "a replica's load was read from its iteration rows"
            routed.append(request.rid)
            return inner.route(request, allowed)

    Cluster(requests_for(spec, 0), replicas, Watching()).run()  # type: ignore[arg-type]
    assert len(routed) == 300
    assert all(list.__len__(r.engine.log.rows) > 100 for r in replicas)  # rows were kept


@pytest.mark.parametrize("rate", [60, 600])
def test_predicted_latencys_one_lookup_routes_as_the_two_bounds_do(rate):
    """The one-lookup shortcut (a shape bounding both predictions from above) routes
    every request where the two exact bounds route it, at a load where it decides
    most arrivals (60 req/s on 4 replicas) and where the fleet is overloaded."""
    from servecal.sched.cluster.cluster import Cluster
    from servecal.sched.cluster.routers import PredictedLatency
    from servecal.sched.cluster.spec import build_cluster
    from servecal.sched.experiment.run import requests_for

    class TwoBounds(PredictedLatency):
        def _surely_meets(self, request, replica):
            return False

    decided = []

    class Checking:
        def __init__(self, inner):
            self.inner = inner

        def route(self, request, replicas):
            first = min(replicas, key=lambda r: r.by_tokens)
            decided.append(self.inner._surely_meets(request, first))
            expected = TwoBounds().route(request, replicas)
            assert self.inner.route(request, replicas) == expected
            return expected

    spec = _cluster(4, "predicted-latency", rate=rate)
    replicas, inner = build_cluster(spec, np.random.default_rng(0))
    Cluster(requests_for(spec, 0), replicas, Checking(inner)).run()  # type: ignore[arg-type]
    assert len(decided) == 600
    if rate == 60:
        assert sum(decided) > 500  # the shortcut decides most arrivals of a calm fleet
    else:
        assert sum(decided) < 600  # and not every one of an overloaded fleet's
