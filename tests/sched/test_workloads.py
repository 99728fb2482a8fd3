"""Synthetic workloads: shapes, rates, SLO stamping, determinism, validation."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from servecal.sched.request import Request
from servecal.sched.workloads import (
    CONTEXT_LIMIT,
    WORKLOADS,
    FixedLengths,
    LogNormalLengths,
    MarkovModulatedArrivals,
    PoissonArrivals,
    QuantileLengths,
    SloClass,
    TraceWorkload,
    TtftRule,
    WorkloadSpec,
    draw_requests,
    generate,
    parse_workload,
)
from servecal.sched.workloads.build import clip_to_context
from servecal.util.errors import InputError


def _arrays(reqs: list[Request]) -> dict[str, np.ndarray]:
    return {
        f.name: np.array([getattr(r, f.name) for r in reqs]) for f in dataclasses.fields(Request)
    }


@pytest.mark.parametrize("name", ["chat", "mixed", "long", "bursty"])
def test_every_workload_yields_sorted_valid_requests(name: str) -> None:
    reqs = generate(name, 20.0, n_requests=2000, tpot_slo_ms=25.0, rng=np.random.default_rng(1))
    a = _arrays(reqs)
    assert len(reqs) == 2000
    assert list(a["rid"]) == list(range(2000))
    assert np.all(np.diff(a["arrival_ms"]) >= 0)
    assert np.all(a["prompt_tokens"] + a["output_tokens"] <= CONTEXT_LIMIT)
    assert np.all(a["tpot_slo_ms"] == 25.0)
    # Default TTFT rule: 500 ms + 0.5 ms per prompt token.
    np.testing.assert_allclose(a["ttft_slo_ms"], 500.0 + 0.5 * a["prompt_tokens"])


def test_chat_matches_spec_median_and_azure_output_shape() -> None:
    a = _arrays(
        generate("chat", 10.0, n_requests=20000, tpot_slo_ms=10.0, rng=np.random.default_rng(2))
    )
    assert abs(np.median(a["prompt_tokens"]) - 256) / 256 < 0.05
    assert abs(np.median(a["output_tokens"]) - 129) / 129 < 0.05
    assert a["output_tokens"].max() <= 1000
    assert set(a["slo_class"]) == {"chat"}


def test_long_prompts_are_documents_with_short_outputs() -> None:
    a = _arrays(
        generate("long", 10.0, n_requests=20000, tpot_slo_ms=10.0, rng=np.random.default_rng(3))
    )
    assert a["prompt_tokens"].min() >= 1024 and a["prompt_tokens"].max() <= 4054
    assert 2700 < np.median(a["prompt_tokens"]) < 2950
    assert 150 < np.median(a["output_tokens"]) < 180


def test_mixed_is_eighty_twenty() -> None:
    a = _arrays(
        generate("mixed", 10.0, n_requests=20000, tpot_slo_ms=10.0, rng=np.random.default_rng(4))
    )
    share_long = np.mean(a["slo_class"] == "long")
    assert abs(share_long - 0.2) < 0.015
    assert a["prompt_tokens"][a["slo_class"] == "long"].min() >= 1024


def test_same_seed_same_requests_other_seed_differs() -> None:
    def draw(seed: int) -> list[Request]:
        return generate(
            "bursty", 5.0, n_requests=300, tpot_slo_ms=50.0, rng=np.random.default_rng(seed)
        )

    assert draw(7) == draw(7)
    assert draw(7) != draw(8)


def test_poisson_mean_rate_and_exponential_gaps() -> None:
    t = PoissonArrivals().times_ms(40.0, np.random.default_rng(5), n_requests=40000)
    gaps = np.diff(t)
    assert abs(gaps.mean() - 25.0) / 25.0 < 0.02
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.03  # exponential: CV = 1


def test_duration_and_count_stop_whichever_first() -> None:
    rng = np.random.default_rng(6)
    by_time = PoissonArrivals().times_ms(10.0, rng, duration_s=100.0)
    assert by_time.max() <= 100_000 and 850 < by_time.size < 1150
    assert PoissonArrivals().times_ms(10.0, rng, n_requests=50, duration_s=1e6).size == 50
    assert PoissonArrivals().times_ms(10.0, rng, n_requests=10**6, duration_s=10).max() <= 10_000
    with pytest.raises(ValueError):
        PoissonArrivals().times_ms(10.0, rng)
    with pytest.raises(ValueError):
        PoissonArrivals().times_ms(0.0, rng, n_requests=3)


def test_bursty_keeps_the_mean_rate_but_bunches_arrivals() -> None:
    proc = WORKLOADS["bursty"].arrivals
    assert isinstance(proc, MarkovModulatedArrivals)
    assert proc.calm_factor == pytest.approx(1 / 3)
    assert proc.burst_share == pytest.approx(0.25)
    rate = 20.0
    t = proc.times_ms(rate, np.random.default_rng(9), duration_s=4000.0)
    assert abs(t.size / 4000.0 - rate) / rate < 0.05
    counts = np.bincount((t // 1000).astype(int), minlength=4000)
    poisson = PoissonArrivals().times_ms(rate, np.random.default_rng(9), duration_s=4000.0)
    pcounts = np.bincount((poisson // 1000).astype(int), minlength=4000)
    # Index of dispersion: 1 for Poisson, far above for the modulated process.
    assert pcounts.var() / pcounts.mean() < 1.2
    assert counts.var() / counts.mean() > 5.0


def test_mmpp_rejects_a_burst_that_leaves_no_calm_rate() -> None:
    with pytest.raises(ValueError):
        MarkovModulatedArrivals(burst_factor=5.0, mean_burst_s=2.0, mean_calm_s=6.0)


def test_clip_keeps_prompt_and_cuts_output() -> None:
    p, o = clip_to_context(np.array([100, 9000, 8000]), np.array([50, 10, 500]), 8192)
    assert list(p) == [100, 8191, 8000]
    assert list(o) == [50, 1, 192]


def test_per_class_tpot_overrides_the_run_target() -> None:
    classes = (
        SloClass("fast", 1.0, FixedLengths(10), FixedLengths(5), TtftRule(100.0), 10.0),
        SloClass("batch", 1.0, FixedLengths(20), FixedLengths(5), TtftRule(900.0)),
    )
    spec = WorkloadSpec("two", "test", classes, PoissonArrivals())
    a = _arrays(
        draw_requests(spec, 5.0, tpot_slo_ms=50.0, rng=np.random.default_rng(0), n_requests=400)
    )
    fast = a["slo_class"] == "fast"
    assert 0.4 < fast.mean() < 0.6
    assert np.all(a["tpot_slo_ms"][fast] == 10.0) and np.all(a["tpot_slo_ms"][~fast] == 50.0)
    assert np.all(a["ttft_slo_ms"][fast] == 100.0) and np.all(a["ttft_slo_ms"][~fast] == 900.0)
    assert np.all(a["prompt_tokens"][fast] == 10)


def test_parse_workload_names_and_errors(tmp_path) -> None:
    assert parse_workload("mixed") is WORKLOADS["mixed"]
    trace = tmp_path / "t.csv"
    trace.write_text("prompt_tokens,output_tokens\n5,5\n")
    assert parse_workload(f"trace:{trace}") == TraceWorkload(trace)
    with pytest.raises(InputError, match="unknown workload 'chatty'.*chat\\|"):
        parse_workload("chatty")
    with pytest.raises(InputError, match="not found"):
        parse_workload(f"trace:{tmp_path / 'missing.csv'}")
    with pytest.raises(InputError):
        generate("nope", 1.0, n_requests=1, tpot_slo_ms=10.0, rng=np.random.default_rng(0))


def test_specs_are_frozen_and_checked() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        WORKLOADS["chat"].context_limit = 4  # type: ignore[misc]
    with pytest.raises(ValueError):
        LogNormalLengths(median=0.0, sigma=1.0)
    with pytest.raises(ValueError):
        QuantileLengths(probs=(0.0, 0.4), values=(1, 2))
    with pytest.raises(ValueError):
        QuantileLengths(probs=(0.0, 1.0), values=(5, 2))
    with pytest.raises(ValueError):
        TtftRule(base_ms=-1.0)
    cls = SloClass("a", 1.0, FixedLengths(1), FixedLengths(1), TtftRule(1.0))
    with pytest.raises(ValueError):
        WorkloadSpec("dup", "x", (cls, cls), PoissonArrivals())
    # Flag-derived arguments are one-line input errors (exit 2 in the CLI).
    with pytest.raises(InputError, match="tpot_slo_ms"):
        generate("chat", 1.0, n_requests=3, tpot_slo_ms=0.0, rng=np.random.default_rng(0))
    with pytest.raises(InputError, match="n_requests"):
        generate("bursty", 1.0, n_requests=0, tpot_slo_ms=5.0, rng=np.random.default_rng(0))
    with pytest.raises(InputError, match="rate"):
        generate("mixed", 0.0, n_requests=5, tpot_slo_ms=5.0, rng=np.random.default_rng(0))


def test_quantile_lengths_follow_their_table() -> None:
    dist = QuantileLengths(probs=(0.0, 0.5, 1.0), values=(100, 200, 1000))
    x = dist.sample(40000, np.random.default_rng(1))
    assert x.min() >= 100 and x.max() <= 1000
    assert abs(np.median(x) - 200) <= 4
    assert abs(np.mean(x <= 150) - 0.25) < 0.01


def test_describe_measures_and_main_prints_every_workload(capsys) -> None:
    from servecal.sched.workloads.__main__ import main
    from servecal.sched.workloads.describe import describe

    d = describe("chat", rate=10.0, n_requests=4000, seed=1)
    assert d["requests"] == 4000 and d["classes"] == {"chat": 1.0}
    assert 240 <= d["prompt_median"] <= 272 and 0.8 < d["dispersion_1s"] < 1.25
    assert main(["5", "200", "3"]) == 0
    table = capsys.readouterr().out
    assert all(f"| {name} |" in table for name in WORKLOADS)
    assert main(["-1"]) == 2 and "usage" in capsys.readouterr().err
