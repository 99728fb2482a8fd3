"""Static baselines and the policy-name parser."""

from __future__ import annotations

import pytest
from enginekit import FakeLive, FakeView, engine, req

from servecal.costmodels import AnalyticPredictor, InputError
from servecal.sched.policies import (
    POLICIES,
    FixedChunk,
    FullPrefill,
    SLOWeave,
    SLOWeaveConfig,
    TokenBudget,
    parse_policy,
)

T = AnalyticPredictor()


def test_fixed_chunk_prefills_min_c_remaining_next_to_all_decodes():
    it = engine([req(0, prompt=600, out=3), req(1, prompt=10, out=2)], FixedChunk(256)).run()
    chunks = list(it.iterations["chunk"])
    assert chunks[:4] == [256, 256, 88, 10]
    assert list(it.iterations["n_decode"])[:4] == [0, 0, 0, 1]


def test_token_budget_counts_decodes_and_spans_prompts():
    ready = [FakeLive(i, 0) for i in range(100)]
    queue = [FakeLive(200, 300), FakeLive(201, 300), FakeLive(202, 5000)]
    plan = TokenBudget(512).plan(FakeView(ready=ready, queue=queue), T)
    assert plan.prefill == ((200, 300), (201, 112))  # 512 − 100 decodes = 412 tokens
    assert TokenBudget(50).plan(FakeView(ready=ready, queue=queue), T).prefill == ()


def test_full_prefill_waits_for_room_for_the_whole_prompt():
    queue = [FakeLive(1, 3000, started=True)]
    assert FullPrefill().plan(FakeView(queue=queue, kv_capacity=2000), T).prefill == ()
    assert FullPrefill().plan(FakeView(queue=queue, kv_capacity=5000), T).prefill == ((1, 3000),)


def test_new_requests_are_admitted_only_when_their_whole_prompt_fits():
    # 1% watermark of M = 10,000 → 100 tokens kept free
    fresh = FakeView(queue=[FakeLive(1, 1000)], kv_capacity=10_000, kv_used=8_950)
    assert FixedChunk(256).plan(fresh, T).prefill == ()
    started = FakeView(queue=[FakeLive(1, 1000, started=True)], kv_capacity=10_000, kv_used=8_950)
    assert FixedChunk(2048).plan(started, T).prefill == ((1, 1000),)


@pytest.mark.parametrize(
    ("name", "kind", "attr"),
    [
        ("fixed-64", FixedChunk, 64),
        ("fixed-2048", FixedChunk, 2048),
        ("budget-8192", TokenBudget, 8192),
    ],
)
def test_parse_parametric_names(name, kind, attr):
    policy = parse_policy(name)
    assert isinstance(policy, kind)
    assert getattr(policy, "chunk", getattr(policy, "budget", None)) == attr


def test_parse_plain_names_and_options():
    assert isinstance(parse_policy("full"), FullPrefill)
    opts = SLOWeaveConfig(aging_ms=500.0)
    assert parse_policy("sloweave", opts).config == opts
    p50 = parse_policy("sloweave-p50", opts).config
    assert (p50.quantile, p50.use_margin, p50.aging_ms) == (0.5, False, 500.0)
    assert isinstance(parse_policy("sloweave"), SLOWeave)
    assert {"full", "sloweave"} <= set(POLICIES)


@pytest.mark.parametrize("name", ["fixed-32", "fixed-4096", "fixed-", "budget-0", "sarathi", ""])
def test_parse_rejects_unknown_names(name):
    with pytest.raises(InputError, match="policy"):
        parse_policy(name)


@pytest.mark.parametrize("policy", [FixedChunk(256), TokenBudget(512), FullPrefill(), SLOWeave()])
def test_a_prompt_that_fits_only_without_the_watermark_still_runs_alone(policy):
    # M = 1000: the prompt fits, but not with the 1% watermark; alone it must still run
    run = engine([req(0, prompt=995, out=3), req(1, prompt=10, out=2)], policy, kv=1000).run()
    assert (run.requests.tokens_out == run.requests.output_tokens).all()
