"""Prefix cache: the block cache itself, the engine's admission and KV accounting with
it, and the done-when checks of issue 39 (hit share = the trace's unbounded share)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from enginekit import req

from servecal.costmodels import AnalyticPredictor
from servecal.sched.engine import Engine, EngineConfig
from servecal.sched.experiment import RunSpec, run
from servecal.sched.metrics import summarize
from servecal.sched.policies import FixedChunk, SLOWeave
from servecal.sched.policies.registry import PolicySpec
from servecal.sched.prefix_cache import (
    PrefixCache,
    PrefixCacheConfig,
    chain_keys,
    unbounded_hit_tokens,
)
from servecal.sched.truth import AnalyticTruth
from servecal.sched.workloads.trace import load_trace

B = 512
MOONCAKE = Path(__file__).resolve().parents[1] / "data" / "mooncake" / "conversation_head200.jsonl"


def cached_engine(requests, policy=None, kv=500_000, max_cached=None):
    return Engine(
        requests,
        policy or FixedChunk(4096),
        AnalyticPredictor(),
        AnalyticTruth().executor(np.random.default_rng(0)),
        EngineConfig(kv_capacity=kv, prefix_cache=PrefixCacheConfig(B, max_cached)),
    )


def with_ids(r, ids):
    return replace(r, block_ids=tuple(ids), block_size=B)


# -- the cache ------------------------------------------------------------------------
def test_chained_keys_match_only_behind_the_same_prefix():
    assert chain_keys([1, 2, 3], 3)[:2] == chain_keys([1, 2, 9], 3)[:2]
    assert chain_keys([7, 2], 2)[1] != chain_keys([1, 2], 2)[1]  # same id, other parent


def test_unreferenced_blocks_are_evicted_least_recently_used_first():
    cache = PrefixCache(PrefixCacheConfig(B))
    a, b = chain_keys([1, 2], 2), chain_keys([5], 1)
    assert cache.reference(a) == 2 and cache.reference(b) == 1
    assert cache.reference(a[:1]) == 0  # already held: no new KV
    assert cache.release(b) == 1 and cache.release(a) == 1  # a[0] still referenced
    assert cache.cached_tokens == 2 * B
    cache.fit(B)  # room for one block: the older (b) goes
    assert b[0] not in cache and a[1] in cache and cache.evictions == 1
    assert cache.match(a, 2) == (2, 1)


# -- the engine -----------------------------------------------------------------------
def test_a_request_whose_first_k_blocks_are_cached_is_charged_and_scheduled_from_512k():
    first = with_ids(req(0, at=0.0, prompt=5 * B + 100, out=2), [1, 2, 3, 4, 5, 6])
    # shares 3 blocks, then differs; arrives after the first finished
    second = with_ids(req(1, at=10_000.0, prompt=4 * B + 10, out=2), [1, 2, 3, 9, 10])
    run_ = cached_engine([first, second]).run()
    it = run_.iterations
    chunks = it[it["chunk"] > 0]
    assert list(chunks["chunk"]) == [5 * B + 100, B + 10]
    assert list(chunks["prefix"]) == [0, 3 * B]
    pred = AnalyticPredictor()
    assert chunks["duration_ms"].iloc[1] == pytest.approx(pred.predict(0, B + 10, 0, 3 * B))
    assert list(run_.requests["cached_tokens"]) == [0, 3 * B]


def test_a_whole_cached_prompt_still_computes_its_last_block():
    first = with_ids(req(0, at=0.0, prompt=2 * B, out=2), [1, 2])
    again = with_ids(req(1, at=10_000.0, prompt=2 * B, out=2), [1, 2])
    run_ = cached_engine([first, again]).run()
    assert list(run_.requests["cached_tokens"]) == [0, B]  # one token at least: a block


def test_an_evicted_block_is_recomputed():
    first = with_ids(req(0, at=0.0, prompt=3 * B, out=2), [1, 2, 3])
    evictor = with_ids(req(1, at=5_000.0, prompt=3 * B, out=2), [7, 8, 9])
    again = with_ids(req(2, at=10_000.0, prompt=3 * B + 1, out=2), [1, 2, 3, 4])
    # room for three cached blocks: the evictor's blocks push out the first request's
    run_ = cached_engine([first, evictor, again], max_cached=3 * B).run()
    assert list(run_.requests["cached_tokens"]) == [0, 0, 0]
    # the first's 3 blocks, then the evictor's 3 when the third's recomputed ones are cached
    assert run_.counters["kv_evictions"] == 6
    it = run_.iterations
    assert list(it[it["chunk"] > 0]["prefix"]) == [0, 0, 0]  # all of it computed again
    kept = cached_engine([first, evictor, again], max_cached=6 * B).run()
    assert list(kept.requests["cached_tokens"]) == [0, 0, 3 * B]


def test_shared_blocks_are_counted_once_in_kv():
    long_out = with_ids(req(0, at=0.0, prompt=4 * B, out=20_000), [1, 2, 3, 4])
    sharer = with_ids(req(1, at=1_000.0, prompt=4 * B + 1, out=2), [1, 2, 3, 4, 5])
    eng = cached_engine([long_out, sharer])
    while eng.state.live.get(1) is None or eng.state.live[1].tokens_out == 0:
        assert eng.step()
    a, b = eng.state.live[0], eng.state.live[1]
    # the sharer's 4 blocks are the first request's: only its own token(s) are added
    assert eng.state.kv_used == a.kv_tokens + b.kv_tokens - 4 * B
    eng.run()
    assert eng.state.kv_used == 0


def test_off_is_todays_engine():
    reqs = load_trace(MOONCAKE, 2.0, 50.0, None, np.random.default_rng(0), n_requests=40)
    plain = [replace(r, block_ids=()) for r in reqs]
    spec = RunSpec(workload=f"trace:{MOONCAKE}", policy=PolicySpec.parse("sloweave"),
                   tpot_slo_ms=50.0, rate=2.0, n_requests=40)  # fmt: skip
    off = run(replace(spec, prefix_cache="off"), 0)
    on = run(spec, 0)
    # today's engine: the same requests without identity, no cache configured
    today = Engine(plain, SLOWeave(), *_models(spec, 0), EngineConfig()).run()
    for name, col in today.request_columns.items():
        np.testing.assert_array_equal(off.request_columns[name], col)
    np.testing.assert_array_equal(
        off.iteration_columns["duration_ms"], today.iteration_columns["duration_ms"]
    )
    assert "cached_tokens" not in off.request_columns and "kv_evictions" not in off.counters
    assert on.request_columns["cached_tokens"].sum() > 0


def _models(spec, seed):
    from servecal.sched.experiment.run import _simulated_executor, planning_predictor

    _, executor_ss = np.random.SeedSequence(seed).spawn(2)
    predictor, _ = planning_predictor(spec)
    reqs = load_trace(MOONCAKE, 2.0, 50.0, None, np.random.default_rng(0), n_requests=40)
    return predictor, _simulated_executor(spec, np.random.default_rng(executor_ss), reqs)


# -- done when: the hit share --------------------------------------------------------
def _spaced(n):
    """The slice's first ``n`` requests one at a time (each done before the next)."""
    reqs = load_trace(MOONCAKE, None, 50.0, None, np.random.default_rng(0), n_requests=n)
    return [replace(r, arrival_ms=i * 1e6) for i, r in enumerate(reqs)]


def _hit_share(reqs, kv):
    result = cached_engine(reqs, policy=SLOWeave(), kv=kv).run()
    return summarize(result.request_columns, result.iteration_columns)["prefix_hit_share"]


def test_hit_share_equals_the_unbounded_share_with_room_and_falls_as_capacity_shrinks():
    reqs = _spaced(60)
    hit, total = unbounded_hit_tokens(reqs)
    assert hit > 0
    roomy = _hit_share(reqs, kv=10**8)
    assert roomy == pytest.approx(hit / total)
    small = _hit_share(reqs, kv=60_000)
    assert small < roomy


def test_sorted_f_counts_shared_blocks_once_and_never_overfills():
    from servecal.sched.sortedf.online import SortedFOnline

    reqs = load_trace(MOONCAKE, 4.0, 50.0, None, np.random.default_rng(0), n_requests=60)
    eng = cached_engine(reqs, policy=SortedFOnline(), kv=120_000)
    while eng.step():
        assert eng.state.kv_used <= eng.state.kv_capacity
    result = eng.result()
    assert result.request_columns["cached_tokens"].sum() > 0
    assert result.recomputes == 0  # its admissions foresee the peak, shared blocks included


# -- the shared-prefix generator -------------------------------------------------------
def test_shared_prefix_turns_extend_their_session_under_the_class_system_prompt():
    from servecal.sched.workloads import generate
    from servecal.sched.workloads.shared_prefix import SharedPrefix

    rng = np.random.default_rng
    base = generate("multislo", 10.0, 300, tpot_slo_ms=50.0, rng=rng(0))
    shared = generate("multislo+prefix", 10.0, 300, tpot_slo_ms=50.0, rng=rng(0))
    assert [r.arrival_ms for r in shared] == [r.arrival_ms for r in base]
    assert [r.output_tokens for r in shared] == [r.output_tokens for r in base]
    assert all(s.prompt_tokens >= b.prompt_tokens for s, b in zip(shared, base, strict=True))
    sys_blocks = SharedPrefix().system_prompt_tokens // 512
    by_class: dict[str, set] = {}
    for r in shared:
        assert len(r.block_ids) == -(-r.prompt_tokens // 512)
        by_class.setdefault(r.slo_class, set()).add(r.block_ids[:sys_blocks])
    assert all(len(heads) == 1 for heads in by_class.values())  # one system prompt a class
    assert len({heads.pop() for heads in by_class.values()}) == len(by_class)
    # some turn extends an earlier one: its blocks start with all of that turn's full ones
    extends = sum(
        1
        for i, r in enumerate(shared)
        for e in shared[max(0, i - 40) : i]
        if len(e.block_ids) > sys_blocks + 1
        and r.block_ids[: len(e.block_ids) - 1] == e.block_ids[:-1]
    )
    assert extends > 0
    hit, total = unbounded_hit_tokens(shared)
    assert hit / total > 0.3


# -- cache-aware routing -------------------------------------------------------------
def _cluster_spec(router, n=2, **kw):
    from servecal.sched.cluster.spec import ClusterSpec, ReplicaSpec

    replica = ReplicaSpec(PolicySpec.parse("sloweave"))
    return ClusterSpec(f"trace:{MOONCAKE}", (replica,) * n, PolicySpec.parse(router),
                       tpot_slo_ms=50.0, rate=3.0, n_requests=120, **kw)  # fmt: skip


def test_a_one_replica_cluster_with_its_cache_is_the_cached_engine():
    spec = RunSpec(workload=f"trace:{MOONCAKE}", policy=PolicySpec.parse("sloweave"),
                   tpot_slo_ms=50.0, rate=3.0, n_requests=120)  # fmt: skip
    single = run(spec, 0)
    cluster = run(_cluster_spec("round-robin", n=1), 0)
    np.testing.assert_array_equal(
        cluster.request_columns["cached_tokens"], single.request_columns["cached_tokens"]
    )
    assert cluster.counters["kv_evictions"] == single.counters["kv_evictions"]


def test_prefix_affinity_serves_more_from_cache_than_round_robin():
    from servecal.sched.cluster.spec import ClusterSpec, ReplicaSpec

    shares = {}
    for router in ("round-robin", "prefix-affinity"):
        replicas = (ReplicaSpec(PolicySpec.parse("sloweave")),) * 4
        spec = ClusterSpec("chat+prefix", replicas, PolicySpec.parse(router),
                           tpot_slo_ms=50.0, rate=40.0, n_requests=400)  # fmt: skip
        result = run(spec, 0)
        shares[router] = summarize(result.request_columns, result.iteration_columns)[
            "prefix_hit_share"
        ]
    assert shares["prefix-affinity"] > shares["round-robin"] > 0


# -- the command line ------------------------------------------------------------------
def test_simulate_on_a_mooncake_trace_reports_the_hit_share_and_evictions(tmp_path):
    import json

    from typer.testing import CliRunner

    from servecal.cli import app

    shipped = (
        Path(__file__).resolve().parents[2] / "sched/data/mooncake/conversation_head2000.jsonl"
    )
    base = ["simulate", "--workload", f"trace:{shipped}", "--policy", "sloweave",
            "--tpot-slo", "50", "--seeds", "1", "--requests", "40", "--json"]  # fmt: skip
    runner = CliRunner()
    on = runner.invoke(app, [*base, "--out", str(tmp_path / "on")])
    assert on.exit_code == 0, on.output
    doc = json.loads(on.stdout)
    assert doc["prefix_hit_share"] > 0 and "kv_evictions" in doc
    run_json = json.loads((tmp_path / "on" / "seed-0" / "run.json").read_text())
    assert run_json["summary"]["prefix_hit_share"] == doc["prefix_hit_share"]
    assert run_json["config"]["prefix_cache"] == "auto"
    off = runner.invoke(app, [*base, "--out", str(tmp_path / "off"), "--prefix-cache", "off"])
    assert off.exit_code == 0, off.output
    assert "prefix_hit_share" not in json.loads(off.stdout)
