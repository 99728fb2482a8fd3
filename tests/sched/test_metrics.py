"""SLO metrics on hand-computed toy runs."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from servecal.sched.metrics import mean_over_seeds, request_outcomes, summarize
from servecal.util.errors import InputError

NAN = math.nan


def _requests(rows: list[dict]) -> pd.DataFrame:
    base = {
        "prompt_tokens": 100,
        "ttft_slo_ms": 500.0,
        "tpot_slo_ms": 25.0,
        "slo_class": "default",
        "tpot_mean_ms": NAN,
        "tpot_max_ms": NAN,
        "recomputes": 0,
        "parks": 0,
        "slo_exception": False,
    }
    return pd.DataFrame([{**base, "rid": i, **r} for i, r in enumerate(rows)])


# Five requests, times in ms. Expected outcomes worked out by hand:
#  0: TTFT 100 ≤ 500, TPOT 20 ≤ 25, finished                    -> good
#  1: TTFT 600 > 500                                            -> bad (TTFT)
#  2: one output token, no gap (NaN TPOT), finished, TTFT 50    -> good (TPOT trivially met)
#  3: TPOT 30 > 25                                              -> bad (TPOT)
#  4: never got a first token, unfinished                       -> bad; censored TTFT
TOY = [
    dict(
        arrival_ms=0.0,
        first_token_ms=100.0,
        completion_ms=1000.0,
        output_tokens=10,
        tokens_out=10,
        tpot_p99_ms=20.0,
    ),
    dict(
        arrival_ms=100.0,
        first_token_ms=700.0,
        completion_ms=1500.0,
        output_tokens=10,
        tokens_out=10,
        tpot_p99_ms=10.0,
    ),
    dict(
        arrival_ms=200.0,
        first_token_ms=250.0,
        completion_ms=250.0,
        output_tokens=1,
        tokens_out=1,
        tpot_p99_ms=NAN,
    ),
    dict(
        arrival_ms=300.0,
        first_token_ms=400.0,
        completion_ms=2000.0,
        output_tokens=20,
        tokens_out=20,
        tpot_p99_ms=30.0,
        recomputes=2,
    ),
    dict(
        arrival_ms=1800.0,
        first_token_ms=NAN,
        completion_ms=NAN,
        output_tokens=5,
        tokens_out=0,
        tpot_p99_ms=NAN,
    ),
]


def test_request_outcomes_by_hand() -> None:
    out = request_outcomes(_requests(TOY))
    assert list(out["good"]) == [True, False, True, False, False]
    assert list(out["ttft_met"]) == [True, False, True, True, False]
    assert list(out["tpot_met"]) == [True, True, True, False, False]
    assert list(out["finished"]) == [True, True, True, True, False]
    np.testing.assert_allclose(out["ttft_ms"][:4], [100.0, 600.0, 50.0, 100.0])
    assert math.isnan(out["ttft_ms"][4])


def test_summary_by_hand() -> None:
    s = summarize(_requests(TOY))
    assert s["requests"] == 5 and s["finished"] == 4 and s["good"] == 2
    # Window: first arrival 0 ms -> last completion 2000 ms = 2 s; 2 good requests.
    assert s["goodput"] == pytest.approx(1.0)
    assert s["attainment"] == pytest.approx(0.4)
    # TTFTs 100, 600, 50, 100 and the censored 2000 - 1800 = 200.
    ttfts = [100.0, 600.0, 50.0, 100.0, 200.0]
    assert s["mean_ttft_ms"] == pytest.approx(np.mean(ttfts))
    assert s["p99_ttft_ms"] == pytest.approx(np.percentile(ttfts, 99))
    # Per-request TPOT figures 20, 10, 30 (NaNs skipped).
    assert s["p99_tpot_ms"] == pytest.approx(np.percentile([20.0, 10.0, 30.0], 99))
    assert s["recomputes"] == 2 and s["parks"] == 0
    assert s["energy_per_good_request_j"] is None and s["iterations"] is None
    assert s["online"] == {"p50_mape": None, "p99_coverage": None}
    json.dumps(s)  # plain JSON: no NaN, no numpy scalars that json rejects


def test_goodput_window_starts_at_first_arrival_not_zero() -> None:
    shifted = [
        {**r, **{k: r[k] + 10_000.0 for k in ("arrival_ms", "first_token_ms", "completion_ms")}}
        for r in TOY
    ]
    assert summarize(_requests(shifted))["goodput"] == pytest.approx(1.0)


def _iterations(energy: list[float]) -> pd.DataFrame:
    n = len(energy)
    return pd.DataFrame(
        {
            "start_ms": np.arange(n) * 10.0,
            "duration_ms": [10.0, 20.0, 10.0, 40.0][:n],
            "pred_p50_ms": [11.0, 16.0, 10.0, 30.0][:n],
            "pred_p99_ms": [12.0, 18.0, 11.0, 35.0][:n],
            "margin_ms": [0.0, 1.0, 0.0, 4.0][:n],
            "energy_j": energy,
            "decision_us": [3.0, 5.0, 7.0, 100.0][:n],
        }
    )


def test_energy_and_online_validation_by_hand() -> None:
    s = summarize(_requests(TOY), _iterations([1.0, 2.0, 3.0, 4.0]))
    assert s["energy_j"] == pytest.approx(10.0)
    assert s["energy_per_good_request_j"] == pytest.approx(5.0)  # 10 J / 2 good
    assert s["energy_per_output_token_j"] == pytest.approx(10.0 / 41)  # 10+10+1+20+0 tokens
    assert s["iterations"] == 4
    assert s["decision_us_median"] == pytest.approx(6.0)
    # |err|/actual: 0.1, 0.2, 0, 0.25 -> mean 0.1375
    assert s["online"]["p50_mape"] == pytest.approx(0.1375)
    # actual <= p99 + margin: 10<=12 yes, 20<=19 no, 10<=11 yes, 40<=39 no
    assert s["online"]["p99_coverage"] == pytest.approx(0.5)


def test_energy_none_when_any_iteration_lacks_a_reading() -> None:
    s = summarize(_requests(TOY), _iterations([1.0, NAN, 3.0, 4.0]))
    assert s["energy_per_good_request_j"] is None
    assert s["energy_per_output_token_j"] is None
    s = summarize(_requests(TOY), _iterations([NAN] * 4))
    assert s["energy_j"] is None and s["iterations"] == 4


def test_energy_per_good_request_none_when_nothing_is_good() -> None:
    bad = [{**r, "ttft_slo_ms": 1.0} for r in TOY]
    s = summarize(_requests(bad), _iterations([1.0, 2.0, 3.0, 4.0]))
    assert s["good"] == 0 and s["goodput"] == 0.0
    assert s["energy_per_good_request_j"] is None
    assert s["energy_per_output_token_j"] == pytest.approx(10.0 / 41)


def test_ttft_only_goodput_does_not_need_completion() -> None:
    # A prefill instance: request 4 got its first token in time but never completes here.
    rows = [dict(TOY[0]), {**TOY[4], "first_token_ms": 1900.0}]
    out = request_outcomes(_requests(rows), slos=("ttft",))
    assert list(out["good"]) == [True, True]
    assert list(request_outcomes(_requests(rows))["good"]) == [True, False]
    s = summarize(_requests(rows), slos=("ttft",))
    # Window closes at the last first token: 0 -> 1900 ms.
    assert s["goodput"] == pytest.approx(2 / 1.9)
    with pytest.raises(ValueError):
        request_outcomes(_requests(rows), slos=("e2e",))


def test_unfinished_request_with_one_token_is_not_good() -> None:
    rows = [
        dict(
            arrival_ms=0.0,
            first_token_ms=10.0,
            completion_ms=NAN,
            output_tokens=8,
            tokens_out=1,
            tpot_p99_ms=NAN,
        )
    ]
    out = request_outcomes(_requests(rows))
    assert not out["tpot_met"][0] and not out["good"][0] and out["ttft_met"][0]
    s = summarize(_requests(rows))
    assert s["goodput"] == 0.0 and s["finished"] == 0 and s["p99_tpot_ms"] is None


def test_missing_column_is_one_line_input_error() -> None:
    frame = _requests(TOY).drop(columns=["tpot_p99_ms"])
    with pytest.raises(InputError, match="tpot_p99_ms"):
        summarize(frame)


def test_mean_over_seeds_means_stds_and_nones() -> None:
    a = summarize(_requests(TOY), _iterations([1.0, 2.0, 3.0, 4.0]))
    b = {
        **a,
        "goodput": 3.0,
        "energy_per_good_request_j": None,
        "online": {"p50_mape": 0.2, "p99_coverage": None},
    }
    m = mean_over_seeds([a, b])
    assert m["seeds"] == 2
    assert m["goodput"] == pytest.approx(2.0)
    assert m["goodput_std"] == pytest.approx(np.std([1.0, 3.0], ddof=1))
    assert m["attainment_std"] == pytest.approx(0.0)
    assert m["energy_per_good_request_j"] == pytest.approx(5.0)  # the one seed that has it
    assert m["online"]["p50_mape"] == pytest.approx((0.1375 + 0.2) / 2)
    assert m["online"]["p99_coverage"] == pytest.approx(0.5)
    assert m["iterations"] == 4
    one = mean_over_seeds([a])
    assert one["goodput_std"] == 0.0 and one["goodput"] == a["goodput"]
    with pytest.raises(ValueError):
        mean_over_seeds([])


def test_mean_over_seeds_keeps_agreeing_labels_only() -> None:
    m = mean_over_seeds([{"policy": "full", "x": 1}, {"policy": "full", "x": 3}])
    assert m["policy"] == "full" and m["x"] == 2.0
    assert "policy" not in mean_over_seeds([{"policy": "a"}, {"policy": "b"}])


def test_rejected_requests_are_not_good_and_leave_ttft_stats() -> None:
    frame = _requests(TOY)
    frame["rejected"] = [False, False, False, False, True]
    s = summarize(frame)
    assert s["rejected"] == 1 and s["good"] == 2 and s["attainment"] == pytest.approx(0.4)
    # Request 4's censored 200 ms is gone: TTFTs 100, 600, 50, 100.
    assert s["mean_ttft_ms"] == pytest.approx(212.5)
    assert summarize(_requests(TOY))["rejected"] == 0


def test_empty_run_summarises_to_zeros_and_nones() -> None:
    s = summarize(_requests(TOY).iloc[0:0])
    assert s["requests"] == 0 and s["goodput"] == 0.0 and s["attainment"] == 0.0
    assert s["p99_ttft_ms"] is None and s["mean_ttft_ms"] is None and s["p99_tpot_ms"] is None


@pytest.mark.parametrize("size", [1, 2, 3, 7, 8, 100, 101, 102, 1000])
def test_p99_and_median_are_numpys_floats_exactly(size):
    """The partition-based quantiles the metrics and the request rows use give the very
    floats ``np.percentile(v, 99)`` and ``np.median(v)`` give (two-sided interpolation
    and the mean of the middle two included), ties and repeated values too."""
    from servecal.sched.result import median, p99

    rng = np.random.default_rng(size)
    for scale in (1e-3, 1.0, 30.0, 1e6):
        for values in (rng.random(size) * scale, np.round(rng.random(size) * scale, 1)):
            assert p99(values) == float(np.percentile(values, 99))
            assert median(values) == float(np.median(values))


def test_a_simulated_summary_does_not_import_numpy_ma():
    """numpy's percentile and median import numpy.ma on first use (~7 ms a process);
    the summary's quantiles, on a simulated run's columns, do not."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import numpy as np\n"
        "from servecal.sched.metrics import summarize\n"
        "a = np.array\n"
        "req = {'rid': a([0, 1]), 'arrival_ms': a([0.0, 1.0]), 'prompt_tokens': a([10, 10]),"
        " 'output_tokens': a([3, 3]), 'ttft_slo_ms': a([500.0] * 2),"
        " 'tpot_slo_ms': a([25.0] * 2), 'slo_class': a(['default'] * 2, dtype=object),"
        " 'first_token_ms': a([5.0, 9.0]), 'completion_ms': a([40.0, 50.0]),"
        " 'tokens_out': a([3, 3]), 'tpot_p99_ms': a([20.0, 22.0]),"
        " 'tpot_mean_ms': a([18.0, 20.0]), 'tpot_max_ms': a([20.0, 22.0]),"
        " 'recomputes': a([0, 0]), 'parks': a([0, 0]), 'slo_exception': a([False] * 2),"
        " 'rejected': a([False] * 2)}\n"
        "it = {'duration_ms': a([5.0, 7.0, 9.0]), 'decision_us': a([3.0, 4.0, 5.0])}\n"
        "before = 'numpy.ma' in sys.modules\n"
        "s = summarize(req, it)\n"
        "print(before, 'numpy.ma' in sys.modules, s['p99_tpot_ms'], s['decision_us_median'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", str(np.percentile([20.0, 22.0], 99)), "4.0"]
