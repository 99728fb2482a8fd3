"""Ratios to the best static baseline: named per cell, and never a bound read as a value."""

from __future__ import annotations

import pytest

from servecal.sched.experiment.rows import ratio_text, ratios


def _row(policy: str, value: float, bound: str = "measured", per_seed=None, tpot=25.0) -> dict:
    return {"setting": "colocated", "tpot_slo": tpot, "workload": "mixed", "policy": policy,
            "max_goodput": value, "max_goodput_bound": bound,
            "max_goodput_per_seed": per_seed or [value]}  # fmt: skip


def test_the_best_fixed_chunk_is_named_per_cell_and_ratios_are_seed_by_seed_too() -> None:
    rows = [_row("fixed-512", 48.0, per_seed=[47.0, 49.0]),
            _row("fixed-2048", 10.0, per_seed=[9.0, 11.0]),
            _row("sloweave", 50.0, per_seed=[49.0, 51.0]),
            _row("fixed-512", 51.0, tpot=50.0), _row("fixed-2048", 59.0, tpot=50.0),
            _row("sloweave", 60.0, tpot=50.0)]  # fmt: skip
    by_target = {r["tpot_slo"]: r for r in ratios(rows)}
    assert by_target[25.0]["best_baseline"] == "fixed-512"
    assert by_target[50.0]["best_baseline"] == "fixed-2048"
    assert by_target[25.0]["ratio"] == pytest.approx(50 / 48)
    assert by_target[25.0]["ratio_per_seed"] == pytest.approx([49 / 47, 51 / 49])
    assert ratio_text(by_target[50.0]) == "1.017x" and by_target[50.0]["ratio_bound"] is None


def test_a_maximum_above_the_cap_makes_the_ratio_a_bound() -> None:
    above = ratios([_row("fixed-512", 40.0), _row("sloweave", 80.0, "above_cap")])[0]
    assert above["ratio_bound"] == "at_least" and ratio_text(above) == ">= 2.000x"
    below = ratios([_row("fixed-512", 80.0, "above_cap"), _row("sloweave", 40.0)])[0]
    assert below["ratio_bound"] == "at_most" and ratio_text(below) == "<= 0.500x"
    both = ratios([_row("fixed-512", 80.0, "above_cap"), _row("sloweave", 80.0, "above_cap")])[0]
    assert both["ratio"] is None and ratio_text(both) == "-"
