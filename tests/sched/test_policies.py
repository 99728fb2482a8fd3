"""Static baselines and the policy-name parser."""

from __future__ import annotations

import pytest
from enginekit import FakeLive, FakeView, engine, req

from servecal.costmodels import AnalyticPredictor, InputError
from servecal.sched.policies import (
    POLICIES,
    ROUTERS,
    FixedChunk,
    FullPrefill,
    PolicySpec,
    SLOWeave,
    TokenBudget,
    listing,
    make_policy,
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
        ("fixed-16", FixedChunk, 16),  # any C >= 1 (the demo's scaled chunks are small)
        ("fixed-2048", FixedChunk, 2048),
        ("budget-8192", TokenBudget, 8192),
    ],
)
def test_parse_parametric_names(name, kind, attr):
    policy = make_policy(name)
    assert isinstance(policy, kind)
    assert getattr(policy, "chunk", getattr(policy, "budget", None)) == attr


def test_names_presets_and_options():
    assert isinstance(make_policy("full"), FullPrefill)
    assert make_policy("sloweave", aging_ms=500.0).config.aging_ms == 500.0
    p50 = make_policy("sloweave-p50", aging_ms=500.0).config
    assert (p50.quantile, p50.use_margin, p50.aging_ms) == (0.5, False, 500.0)
    assert isinstance(make_policy("sloweave"), SLOWeave)
    assert make_policy("edf-chunk-256") == TokenBudget(256, order="edf")
    assert {"full", "sloweave", "flowprefill"} <= {e.name for e in POLICIES}


@pytest.mark.parametrize("name", ["fixed-0", "fixed-", "budget-0", "sarathi", "", "fixed"])
def test_parse_rejects_unknown_names(name):
    with pytest.raises(InputError, match="policy"):
        make_policy(name)


@pytest.mark.parametrize(
    ("name", "opts", "message"),
    [
        ("sloweave", {"aging_ms": "soon"}, "aging_ms takes a number"),
        ("sloweave", {"c_mx": "1"}, "has no option 'c_mx'"),
        ("sloweave", {"quantile": "2"}, "quantile must be in (0, 1)"),
        ("sloweave", {"admission": "maybe"}, "takes true or false"),
        ("sloweave-p50", {"quantile": "0.9"}, "fixes quantile"),
        ("fixed-256", {"chunk": "128"}, "fixes chunk"),
    ],
)
def test_options_are_typed_and_checked_in_one_line(name, opts, message):
    with pytest.raises(InputError, match="policy|--opt") as info:
        PolicySpec.parse(name, opts)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_options_parse_to_their_types_and_label_the_policy():
    spec = PolicySpec.parse("sloweave", {"aging_ms": "500", "admission": "yes", "c_max": "2048"})
    config = spec.build("engine").config
    assert (config.aging_ms, config.admission, config.c_max) == (500.0, True, 2048)
    assert spec.label == "sloweave[admission=True,aging_ms=500.0,c_max=2048]"
    assert (
        PolicySpec.parse("sloweave", {"aging_ms": "none"}).build("engine").config.aging_ms is None
    )


def test_a_policy_runs_only_on_its_backends():
    with pytest.raises(InputError, match="runs on operator-driver"):
        make_policy("flowprefill")
    with pytest.raises(InputError, match="on the engine has no option 'batch_tokens'"):
        make_policy("fcfs", batch_tokens=1024)  # fcfs is `full` on the engine
    assert make_policy("fcfs", "operator-driver", batch_tokens=1024).batch_tokens == 1024


def test_the_listing_names_every_policy_its_backends_and_options():
    rows = {r["name"]: r for r in listing()}
    assert set(rows) >= {"fixed-N", "budget-N", "sloweave", "flowprefill", "sorted-f-online"}
    assert rows["budget-N"]["backends"] == ["engine", "operator-driver"]
    assert "aging_ms: float | None = None" in rows["sloweave"]["options"]
    assert rows["sloweave-p50"]["fixed"] == {
        "quantile": 0.5,
        "use_margin": False,
        "margin_control": "fixed",
    }
    assert "quantile: float = 0.99" not in rows["sloweave-p50"]["options"]


@pytest.mark.parametrize("policy", [FixedChunk(256), TokenBudget(512), FullPrefill(), SLOWeave()])
def test_a_prompt_that_fits_only_without_the_watermark_still_runs_alone(policy):
    # M = 1000: the prompt fits, but not with the 1% watermark; alone it must still run
    run = engine([req(0, prompt=995, out=3), req(1, prompt=10, out=2)], policy, kv=1000).run()
    assert (run.requests.tokens_out == run.requests.output_tokens).all()


def test_servecal_policies_lists_names_backends_and_options():
    import json

    from typer.testing import CliRunner

    from servecal.cli import app

    result = CliRunner().invoke(app, ["policies"])
    assert result.exit_code == 0, result.output
    assert "sloweave  [engine]" in result.output and "aging_ms: float | None" in result.output
    assert "budget-N  [engine, operator-driver]" in result.output
    rows = json.loads(CliRunner().invoke(app, ["policies", "--json"]).stdout)
    every = [*POLICIES, *ROUTERS]  # one namespace: `servecal policies` lists both
    assert [r["name"] for r in rows] == [e.name + ("-N" if e.number else "") for e in every]
