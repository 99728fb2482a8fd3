"""The ``tenants`` workload: mixed lengths, three TPOT tiers scaled by --tpot-slo, and the
per-tier metrics a run reports."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from servecal.sched.metrics import summarize, summarize_by_tpot_slo, tpot_slo_key
from servecal.sched.workloads import WORKLOADS, generate
from servecal.sched.workloads.classes import SloClass, TpotTier, TtftRule, tiered
from servecal.sched.workloads.lengths import FixedLengths


def _draw(tpot: float, n: int = 30_000, seed: int = 16) -> pd.DataFrame:
    reqs = generate(
        "tenants", 20.0, n_requests=n, tpot_slo_ms=tpot, rng=np.random.default_rng(seed)
    )
    return pd.DataFrame([r.__dict__ for r in reqs])


def test_tpot_slo_25_gives_10_25_50_ms_at_30_40_30_percent() -> None:
    f = _draw(25.0)
    shares = f["tpot_slo_ms"].value_counts(normalize=True).to_dict()
    assert set(shares) == {10.0, 25.0, 50.0}  # exactly these values
    assert shares[10.0] == pytest.approx(0.3, abs=0.01)
    assert shares[25.0] == pytest.approx(0.4, abs=0.01)
    assert shares[50.0] == pytest.approx(0.3, abs=0.01)


def test_tiers_scale_with_the_runs_target_as_the_middle_class() -> None:
    for target in (10.0, 50.0):
        got = set(_draw(target, n=3000)["tpot_slo_ms"])
        assert got == {0.4 * target, target, 2.0 * target}


def test_lengths_and_ttft_are_mixeds_and_tiers_are_independent_of_them() -> None:
    f = _draw(25.0)
    f["length_class"] = f["slo_class"].str.split("-").str[0]
    assert set(f["length_class"]) == {"chat", "long"}
    assert (f["length_class"] == "long").mean() == pytest.approx(0.2, abs=0.01)
    # the tier does not depend on the length class
    strict = f["tpot_slo_ms"] == 10.0
    for name in ("chat", "long"):
        assert strict[f["length_class"] == name].mean() == pytest.approx(0.3, abs=0.025)
    # same length distributions as mixed
    m = pd.DataFrame(
        [r.__dict__ for r in generate("mixed", 20.0, n_requests=30_000, tpot_slo_ms=25.0,
                                       rng=np.random.default_rng(17))]
    )  # fmt: skip
    for col in ("prompt_tokens", "output_tokens"):
        for q in (0.25, 0.5, 0.9):
            assert f[col].quantile(q) == pytest.approx(m[col].quantile(q), rel=0.06)
    # TTFT SLO: 500 ms + 0.5 ms per prompt token
    np.testing.assert_allclose(f["ttft_slo_ms"], 500.0 + 0.5 * f["prompt_tokens"])


def test_tiered_crosses_classes_and_tiers() -> None:
    base = SloClass("a", 2.0, FixedLengths(10), FixedLengths(5), TtftRule(100.0))
    classes = tiered((base,), (TpotTier("x", 0.25, 0.5), TpotTier("y", 0.75, 3.0)))
    assert [(c.name, c.share, c.tpot_scale) for c in classes] == [
        ("a-x", 0.5, 0.5),
        ("a-y", 1.5, 3.0),
    ]
    assert WORKLOADS["tenants"].arrivals == WORKLOADS["mixed"].arrivals
    with pytest.raises(ValueError, match="tpot_scale"):
        SloClass("b", 1.0, FixedLengths(1), FixedLengths(1), TtftRule(1.0), tpot_scale=0.0)


def _run(rows: list[dict]) -> pd.DataFrame:
    base = {
        "prompt_tokens": 100,
        "ttft_slo_ms": 500.0,
        "slo_class": "default",
        "recomputes": 0,
        "parks": 0,
        "output_tokens": 10,
        "tokens_out": 10,
    }
    return pd.DataFrame([{**base, "rid": i, **r} for i, r in enumerate(rows)])


def test_per_tier_attainment_and_goodput_share_by_hand() -> None:
    # 10 ms tier: 2 requests, one meets TPOT (8 ≤ 10) and TTFT, one misses TPOT (12 > 10);
    # 25 ms tier: 3 requests, all meet TPOT, one misses TTFT (600 > 500);
    # 50 ms tier: 1 request, good. Window: 0 → 2000 ms.
    # (tpot SLO, first token, completion, TPOT figure); every arrival at 0
    table = [
        (10.0, 100, 500, 8.0),
        (10.0, 100, 600, 12.0),
        (25.0, 100, 900, 20.0),
        (25.0, 600, 1500, 20.0),
        (25.0, 100, 2000, 24.0),
        (50.0, 100, 700, 45.0),
    ]
    rows = [
        dict(tpot_slo_ms=s, arrival_ms=0, first_token_ms=f, completion_ms=c, tpot_p99_ms=g)
        for s, f, c, g in table
    ]
    got = summarize_by_tpot_slo(_run(rows))
    assert list(got) == ["10", "25", "50"]
    assert got["10"]["attainment"] == 0.5 and got["10"]["tpot_attainment"] == 0.5
    assert got["25"]["attainment"] == pytest.approx(2 / 3) and got["25"]["tpot_attainment"] == 1.0
    assert got["50"]["attainment"] == 1.0
    assert [got[k]["share"] for k in got] == pytest.approx([2 / 6, 3 / 6, 1 / 6])
    assert [got[k]["goodput_share"] for k in got] == pytest.approx([1 / 4, 2 / 4, 1 / 4])
    assert [got[k]["goodput"] for k in got] == pytest.approx([0.5, 1.0, 0.5])  # per 2 s
    whole = summarize(_run(rows))
    assert whole["by_tpot_slo"] == got
    assert sum(t["goodput"] for t in got.values()) == pytest.approx(whole["goodput"])
    # one TPOT SLO: no breakdown
    assert "by_tpot_slo" not in summarize(_run([{**r, "tpot_slo_ms": 25.0} for r in rows]))
    assert tpot_slo_key(10.000000000000002) == "10" and tpot_slo_key(12.5) == "12.5"
    assert math.isclose(0.4 * 25.0, 10.0)
