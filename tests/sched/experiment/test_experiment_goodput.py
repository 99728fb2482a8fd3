"""The max-goodput search: a bisection whose bracket expands instead of guessing."""

from __future__ import annotations

import pytest

from servecal.costmodels import InputError
from servecal.sched.experiment.goodput import (
    ABOVE_CAP,
    BELOW_FLOOR,
    MEASURED,
    Bracket,
    search_sequentially,
)


def _curve(capacity: float):
    """A monotone attainment curve crossing 90% at ``capacity`` req/s, with a call log."""
    calls: list[float] = []

    def attainment_at(rate: float) -> float:
        calls.append(rate)
        return float(0.9 ** ((rate / capacity) ** 4))  # 1 at 0, exactly 0.9 at capacity

    return attainment_at, calls


def test_the_crossing_inside_the_bracket_is_found_by_bisection() -> None:
    f, calls = _curve(37.0)
    found = search_sequentially(f, Bracket(1.0, 100.0))
    assert len(calls) < 20 and found.probes == len(calls)  # bisection, not a scan
    assert found.bound == MEASURED and f(found.rate) >= 0.9
    assert 37.0 * (1 - 0.02) <= found.rate <= 37.0


def test_a_crossing_above_the_bracket_is_found_by_doubling_not_reported_as_the_top() -> None:
    f, calls = _curve(730.0)
    found = search_sequentially(f, Bracket(1.0, 100.0))
    assert found.bound == MEASURED and 730.0 * 0.98 <= found.rate <= 730.0
    assert calls[:4] == [100.0, 200.0, 400.0, 800.0]  # the top doubles until one misses


def test_a_crossing_below_the_bracket_is_found_by_halving() -> None:
    f, _ = _curve(0.3)
    found = search_sequentially(f, Bracket(1.0, 100.0))
    assert found.bound == MEASURED and 0.3 * 0.98 <= found.rate <= 0.3


def test_limits_are_reported_as_bounds() -> None:
    always, calls = _curve(1e9)
    found = search_sequentially(always, Bracket(1.0, 100.0, cap=1000.0))
    assert (found.rate, found.bound) == (1000.0, ABOVE_CAP) and calls[-1] == 1000.0
    assert found.text() == "> 1000"
    never, _ = _curve(1e-9)
    found = search_sequentially(never, Bracket(1.0, 100.0))
    assert (found.rate, found.bound) == (0.0, BELOW_FLOOR)
    step = search_sequentially(lambda r: 1.0 if r <= 50.0 else 0.0, Bracket(1, 100, rel_tol=1e-3))
    assert 49.9 <= step.rate <= 50.0


@pytest.mark.parametrize("text", ["5:5", "9:1", "1", "a:b", "1:10:5", "0:10"])
def test_bad_brackets_are_one_line_errors(text: str) -> None:
    with pytest.raises(InputError, match="--rate-range"):
        Bracket.parse(text)
    assert Bracket.parse("1:200").limits() == (1 / 16, 3200.0)
    assert Bracket.parse("1:200:500").limits()[1] == 500.0


def test_a_sweep_keeps_every_probe_and_writes_the_search_into_the_run_folder(tmp_path):
    """The report draws attainment against rate from the probes the search measured."""
    import json

    from servecal.sched.experiment import RunSpec, sweep
    from servecal.sched.policies import PolicySpec

    spec = RunSpec("mixed", PolicySpec("fixed-512"), 10.0, rate=20.0, n_requests=120, seeds=(0,))
    (outcome,) = sweep([spec], folders=[tmp_path], goodput=Bracket(10.0, 80.0), jobs=1)
    (probes,) = outcome.mean["max_goodput_probes"]
    assert len(probes) == outcome.summaries[0]["max_goodput_probes_count"] >= 3
    doc = json.loads((tmp_path / "seed-0" / "run.json").read_text())
    search = doc["goodput_search"]
    assert search["probes"] == probes and search["bracket"]["cap"] == 1280.0
    assert doc["summary"]["max_goodput"] == search["max_goodput"] == outcome.mean["max_goodput"]
    assert "max_goodput_bound" not in doc["summary"]  # summaries hold numbers only
    good = [p["rate"] for p in probes if p["attainment"] >= 0.9]
    bad = [p["rate"] for p in probes if p["attainment"] < 0.9]
    assert search["bound"] == MEASURED and max(good) == search["max_goodput"] < min(bad)
    assert min(bad) - max(good) <= 0.02 * min(bad)  # bisected to the bracket's tolerance
    assert all({"tpot_attainment", "goodput", "p99_tpot_ms"} <= set(p) for p in probes)
