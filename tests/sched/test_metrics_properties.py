"""Metrics against a row-by-row reference on random runs (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from servecal.sched.metrics import request_outcomes, summarize


def _random_run(seed: int, n: int) -> pd.DataFrame:
    """A random but consistent requests frame: served/finished/one-token mixes."""
    rng = np.random.default_rng(seed)
    arrival = rng.uniform(0, 1000, n)
    output = rng.integers(1, 6, n)
    served = rng.random(n) < 0.8
    done = served & (rng.random(n) < 0.7)
    first = np.where(served, arrival + rng.uniform(0.1, 500, n), np.nan)
    completion = np.where(done, first + rng.uniform(0, 500, n), np.nan)
    partial = np.minimum(rng.integers(1, 6, n), output)
    tokens = np.where(done, output, np.where(served, partial, 0))
    tpot = np.where(tokens >= 2, rng.uniform(1, 60, n), np.nan)
    return pd.DataFrame(
        dict(rid=np.arange(n), arrival_ms=arrival, prompt_tokens=10, output_tokens=output,
             ttft_slo_ms=rng.choice([50.0, 250.0], n), tpot_slo_ms=25.0,
             first_token_ms=first, completion_ms=completion, tokens_out=tokens,
             tpot_p99_ms=tpot, recomputes=rng.integers(0, 3, n), parks=0)
    )  # fmt: skip


def _reference_good(row: pd.Series) -> bool:
    finished = not math.isnan(row.completion_ms)
    if not finished or math.isnan(row.first_token_ms):
        return False
    if row.first_token_ms - row.arrival_ms > row.ttft_slo_ms:
        return False
    if math.isnan(row.tpot_p99_ms):
        return row.output_tokens == 1
    return row.tpot_p99_ms <= row.tpot_slo_ms


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40))
def test_outcomes_and_summary_match_a_row_by_row_reference(seed: int, n: int) -> None:
    frame = _random_run(seed, n)
    out = request_outcomes(frame)
    expected = [_reference_good(r) for r in frame.itertuples()]
    assert list(out["good"]) == expected
    s = summarize(frame)
    assert s["good"] == sum(expected)
    assert 0.0 <= s["attainment"] <= 1.0
    assert s["attainment"] == sum(expected) / len(frame)
    if any(expected):
        window = (frame.completion_ms.max() - frame.arrival_ms.min()) / 1000.0
        assert math.isclose(s["goodput"], sum(expected) / window, rel_tol=1e-12)
    else:
        assert s["goodput"] == 0.0
    # Never-served requests count as end of run − arrival.
    end = np.nanmax(frame[["arrival_ms", "first_token_ms", "completion_ms"]].to_numpy())
    ttft = [
        (r.first_token_ms if not math.isnan(r.first_token_ms) else end) - r.arrival_ms
        for r in frame.itertuples()
    ]
    assert math.isclose(s["p99_ttft_ms"], np.percentile(ttft, 99), rel_tol=1e-12, abs_tol=1e-9)
    assert s["finished"] == int(frame.completion_ms.notna().sum())
