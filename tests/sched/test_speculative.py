"""Speculative decoding: pricing k + 1 verified tokens, seeded acceptance, delivered
tokens, per-token TPOT, SLOWeave's chunk and the run spec's flag."""

from __future__ import annotations

import json

import numpy as np
import pytest
from enginekit import random_requests, req

from servecal.costmodels import AnalyticPredictor
from servecal.sched import experiment as ex
from servecal.sched.engine import Engine, EngineConfig
from servecal.sched.policies import FixedChunk, SLOWeave
from servecal.sched.policies.registry import PolicySpec
from servecal.sched.policies.sloweave import SLOWeaveConfig, deadline_chunk
from servecal.sched.speculative import (
    SpeculativeConfig,
    SpeculativePredictor,
    delivery_schedule,
    parse_speculative,
)
from servecal.sched.truth import AnalyticTruth

T = AnalyticPredictor()


def _run(requests, spec: SpeculativeConfig | None, policy=None, kv: int = 500_000):
    return Engine(
        requests,
        policy or FixedChunk(256),
        AnalyticPredictor(),
        AnalyticTruth().executor(np.random.default_rng(0)),
        EngineConfig(kv_capacity=kv, speculative=spec),
    ).run()


def _workload(n: int = 60) -> list:
    return random_requests(np.random.default_rng(3), n, rate=20.0)


def test_acceptance_zero_is_slower_than_no_speculation():
    plain = _run(_workload(), None).request_columns
    zero = _run(_workload(), SpeculativeConfig(4, (0.0,))).request_columns
    assert np.array_equal(zero["tokens_out"], plain["tokens_out"])
    # every step still delivers one token, but verifies five: each gap costs more
    assert np.nanmean(zero["tpot_mean_ms"]) > 1.2 * np.nanmean(plain["tpot_mean_ms"])
    assert np.nanmax(zero["completion_ms"]) > np.nanmax(plain["completion_ms"])


def test_acceptance_one_delivers_k_plus_one_tokens_a_step():
    k = 3
    out = 1 + (k + 1) * 5  # the prefill's token, then five full steps
    run = _run([req(0, prompt=100, out=out)], SpeculativeConfig(k, (1.0,)))
    it = run.iteration_columns
    decodes = it["n_decode"] > 0
    assert decodes.sum() == 5
    assert list(it["tokens_delivered"][decodes]) == [k + 1] * 5
    assert list(it["drafts_accepted"][decodes]) == [k] * 5
    # each step is priced as 1·(k+1) decode tokens
    np.testing.assert_allclose(it["duration_ms"][decodes], T.predict(k + 1, 0, 100.0, 0.0))
    row = run.requests.iloc[0]
    assert row.tokens_out == out
    # the gap between deliveries is one step, shared by the k + 1 tokens it delivers
    assert row.tpot_max_ms == pytest.approx(T.predict(k + 1, 0) / (k + 1))


def test_delivered_tokens_are_the_accepted_drafts_plus_one_a_step():
    spec = SpeculativeConfig(4, (0.8, 0.7, 0.5, 0.3), seed=11)
    requests = _workload()
    run = _run(requests, spec, SLOWeave(SLOWeaveConfig()))
    it, rq = run.iteration_columns, run.request_columns
    delivered = it["tokens_delivered"].astype(int)
    assert delivered.sum() == rq["tokens_out"].sum() == sum(r.output_tokens for r in requests)
    steps = sum(len(delivery_schedule(spec, r.rid, r.output_tokens)) - 1 for r in requests)
    # each emitting step of a request delivers 1 + its accepted drafts
    assert delivered.sum() == steps + it["drafts_accepted"].astype(int).sum()
    assert 0 < run.counters["accepted_per_decode"] < 4


def test_the_kv_accounting_ends_empty_with_preemptions():
    spec = SpeculativeConfig(4, (0.9,))
    requests = random_requests(np.random.default_rng(5), 80, rate=80.0)
    engine = Engine(
        requests,
        FixedChunk(512),
        AnalyticPredictor(),
        AnalyticTruth().executor(np.random.default_rng(0)),
        EngineConfig(kv_capacity=9_000, speculative=spec),
    )
    run = engine.run()
    assert run.recomputes > 0  # the small KV forced some
    assert engine.state.kv_used == 0 and engine.state.kv_ready == 0
    assert run.request_columns["tokens_out"].sum() == sum(r.output_tokens for r in requests)


def test_acceptance_is_drawn_per_request_and_seed_not_per_schedule():
    spec = SpeculativeConfig(4, (0.6,), seed=7)
    a = delivery_schedule(spec, 3, 200)
    assert np.array_equal(a, delivery_schedule(spec, 3, 200))
    assert not np.array_equal(a, delivery_schedule(spec.seeded(8), 3, 200))
    assert a[0] == 0 and a[1] == 1 and a[-1] == 200 and a[-2] < 200
    steps = np.diff(a[1:])
    assert steps.min() >= 1 and steps.max() <= 5
    # the i.i.d. rate: mean tokens a step near (1 - a^(k+1)) / (1 - a)
    long = np.diff(delivery_schedule(spec, 1, 200_000)[1:-1])
    assert long.mean() == pytest.approx((1 - 0.6**5) / 0.4, rel=0.02)
    assert spec.expected_tokens() == pytest.approx((1 - 0.6**5) / 0.4)


def test_sloweave_deadline_chunk_prices_the_verification_tokens():
    cfg = SLOWeaveConfig(margin_control="fixed")
    spec = SpeculativeConfig(3, (0.7,))
    wrapped = SpeculativePredictor(T, spec)
    args = (cfg, 8, 500.0, 0, 4096, 0.0, 9.0, 0.0)
    with_spec, _, _ = deadline_chunk(wrapped, *args)
    assert with_spec == deadline_chunk(T, cfg, 32, 500.0, 0, 4096, 0.0, 9.0, 0.0)[0]
    assert with_spec < deadline_chunk(T, *args)[0]


def test_the_flag_parses_and_refuses_bad_values():
    spec = parse_speculative("k=3,accept=0.9/0.8/0.6")
    assert spec.k == 3 and spec.accept == (0.9, 0.8, 0.6)
    assert parse_speculative(spec.text()) == spec
    for bad in ("k=0,accept=0.5", "k=3,accept=0.9/0.8", "k=2,accept=1.5", "k=2", "x=1"):
        with pytest.raises(ValueError):
            parse_speculative(bad)


def test_run_spec_without_speculation_describes_as_before():
    base = dict(workload="chat", policy=PolicySpec.parse("fixed-256", {}), rate=5.0)
    assert "speculative" not in ex.RunSpec(**base).describe()
    spec = ex.RunSpec(**base, speculative="k=2,accept=0.5")
    assert json.loads(json.dumps(spec.describe()))["speculative"] == "k=2,accept=0.5"
    with pytest.raises(ValueError):
        ex.RunSpec(**base, speculative="k=2,accept=0.5", backend="operator-driver")


def test_a_speculative_run_is_a_pure_function_of_spec_and_seed():
    spec = ex.RunSpec(
        workload="chat",
        policy=PolicySpec.parse("sloweave", {}),
        tpot_slo_ms=50.0,
        rate=20.0,
        n_requests=60,
        speculative="k=4,accept=0.7",
    )
    a, b = ex.run(spec, 1), ex.run(spec, 1)
    assert np.array_equal(a.iteration_columns["duration_ms"], b.iteration_columns["duration_ms"])
    assert np.array_equal(a.request_columns["tpot_p99_ms"], b.request_columns["tpot_p99_ms"])


PLAN = (
    '[workload]\nname = "chat"\nrate = 20\nrequests = 60\ntpot_slo_ms = 25\n'
    '[search]\nreplicas = [1, 2]\npolicies = ["sloweave"]\nrouters = ["round-robin"]\n'
    '[[device]]\nname = "A100"\nprice_per_gpu_hour = 2.0\n'
    '[[device.tp]]\nsize = 1\nfleet = "A100x1"\n'
)


def test_a_plan_file_runs_replicas_that_decode_speculatively(tmp_path):
    from servecal.sched.cluster.planner import Config, ReplicaSearch, cluster_spec
    from servecal.sched.cluster.space import load_space
    from servecal.util.errors import InputError

    path = tmp_path / "plan.toml"
    path.write_text(PLAN + 'speculative = "k=3,accept=0.8"\n')
    space = load_space(path)
    (hardware,) = space.hardware
    assert hardware.speculative == "k=3,accept=0.8" and hardware.name == "A100x1+spec"
    config = Config(0, hardware, space.policies[0], space.routers[0], ReplicaSearch(1, 2))
    spec = cluster_spec(space, config, 2, 20.0)
    assert spec.describe()["replicas"][0]["speculative"] == "k=3,accept=0.8"
    result = ex.run(spec, 0)
    assert result.iteration_columns["drafts_accepted"].sum() > 0
    assert (
        result.request_columns["tokens_out"].sum() == result.request_columns["output_tokens"].sum()
    )
    path.write_text(PLAN + 'speculative = "k=3"\n')
    with pytest.raises(InputError, match="device\\[0\\].tp\\[0\\].speculative"):
        load_space(path)


def test_a_separate_drafter_adds_its_k_passes_to_every_decode_step():
    from pathlib import Path

    from servecal.costmodels.table import CostTable

    draft_path = Path(__file__).parents[2] / "sched" / "data" / "device_a100_fitted.json"
    draft = CostTable.load(draft_path)
    k = 3
    spec = SpeculativeConfig(k, (1.0,), draft=str(draft_path))
    out = 1 + (k + 1) * 2
    run = _run([req(0, prompt=100, out=out)], spec)
    it = run.iteration_columns
    decodes = it["n_decode"] > 0
    ctx = it["ctx"][decodes]
    expected = [T.predict(k + 1, 0, c, 0.0) + k * draft.predict(1, 0, c, 0.0, q=0.5) for c in ctx]
    assert it["duration_ms"][decodes] == pytest.approx(expected)
    # the planning side prices the drafter too, so SLOWeave's chunk shrinks by its cost
    wrapped = SpeculativePredictor(T, spec, draft)
    assert wrapped.predict(2, 0, 500.0, 0.0) == pytest.approx(
        T.predict(2 * (k + 1), 0, 500.0, 0.0) + k * draft.predict(2, 0, 500.0, 0.0, q=0.5)
    )
    assert wrapped.max_chunk(2, 500.0, 0, 12.0, 4096) < SpeculativePredictor(T, spec).max_chunk(
        2, 500.0, 0, 12.0, 4096
    )
