"""The demo's derived setting: the paper's formula as the 'calibration' gives its setting back."""

from __future__ import annotations

import dataclasses

import pytest

from servecal.costmodels.analytic import AnalyticPredictor
from servecal.reports.demo.feasible import lift_targets, sustains_floor
from servecal.reports.demo.pipeline import check_enough_rows
from servecal.reports.demo.setting import Axes, derive_setting, grid_for, token_scale
from servecal.sched.experiment import RunSpec, default_rate
from servecal.sched.policies.registry import PolicySpec
from servecal.util.errors import InputError

SPEC_AXES = Axes((0, 1, 8, 40, 256), 4096, (0, 512))


def test_spec_formula_gives_spec_targets_rates_and_policies() -> None:
    setting = derive_setting(AnalyticPredictor(), SPEC_AXES, scale=1.0)
    # The per-token rate read off the table includes the 0.40 ms chunk overhead, so the
    # targets land within 3% of the paper's 10 / 25 / 50 ms, not exactly on them.
    for got, spec in zip(setting.tpot_targets_ms, (10.0, 25.0, 50.0), strict=True):
        assert got == pytest.approx(spec, rel=0.03)
    for w, rate in setting.rates.items():
        assert rate == pytest.approx(default_rate(w), rel=1e-9)
    assert setting.policies == ("fixed-256", "fixed-1024", "full", "sloweave")
    assert setting.c_max == 4096 and setting.aging_chunk == 256
    assert setting.ref_batch == 40


def test_slower_device_gets_proportionally_longer_targets() -> None:
    slow = AnalyticPredictor(1.0, 9.0, 0.55, 4.0, 0.06)  # every coefficient x10 (base ~x3)
    fast = derive_setting(AnalyticPredictor(), SPEC_AXES, scale=1.0)
    setting = derive_setting(slow, SPEC_AXES, scale=1.0)
    for a, b in zip(setting.tpot_targets_ms, fast.tpot_targets_ms, strict=True):
        assert 9.0 < a / b < 10.5
    assert setting.time_dilation == pytest.approx(setting.tpot_targets_ms[1] / 25.0)
    assert any("TPOT targets come from this calibration" in line for line in setting.describe())


def test_cpu_scale_shrinks_chunks_and_grid() -> None:
    assert token_scale(on_gpu=False) == 1 / 8 and token_scale(on_gpu=True) == 1.0
    setting = derive_setting(AnalyticPredictor(), SPEC_AXES, scale=1 / 8)
    assert setting.policies == ("fixed-32", "fixed-128", "full", "sloweave")
    assert grid_for(False, 1 / 8)["chunk"][-1] == 512
    assert grid_for(True, 1.0) is None  # the profiler's GPU grid


def test_too_few_rows_for_a_blind_margin_are_refused() -> None:
    check_enough_rows(200, 20)
    check_enough_rows(16, 10)  # 160 rows: each fold's margin is set on 128 others
    with pytest.raises(InputError, match="raise --budget"):
        check_enough_rows(10, 10)  # 100 rows: 80 per blind margin cannot certify 99%


def test_refine_axis_keeps_measured_points_and_bounds_the_step() -> None:
    from servecal.reports.demo.setting import refine_axis

    fine = refine_axis([0, 32, 128, 512])
    assert {0, 32, 128, 512} <= set(fine) and fine == sorted(set(fine))
    ratios = [b / a for a, b in zip(fine[1:], fine[2:], strict=False)]
    assert max(ratios) <= 1.5 + 1e-9
    assert refine_axis([0, 1]) == [0, 1]


def test_a_target_nothing_sustains_is_lifted_and_looser_ones_are_not_simulated() -> None:
    tried: list[float] = []

    def feasible(d: float) -> bool:
        tried.append(d)
        return d >= 14.0

    assert lift_targets((10.0, 20.0, 40.0), feasible) == (15.625, 20.0, 40.0)
    assert tried == [10.0, 12.5, 15.625]  # 20 and 40 are looser than a passing target
    # a lifted target pushes the next one up, keeping them a step apart
    low, high = lift_targets((10.0, 11.0), lambda d: d >= 30.0)
    assert low >= 30.0 and high == pytest.approx(low * 1.25)


def test_the_floor_probe_simulates_the_run_a_search_would_end_on() -> None:
    spec = RunSpec(workload="chat", policy=PolicySpec("fixed-256"), tpot_slo_ms=25.0,
                   rate=1.0, n_requests=30, seeds=(0, 1))  # fmt: skip
    assert sustains_floor(spec, 0.5)  # the paper's device, half a request per second
    tight = dataclasses.replace(spec, tpot_slo_ms=1.0)  # below one decode iteration
    assert not sustains_floor(tight, 0.5)


def test_a_lifted_setting_says_so() -> None:
    setting = derive_setting(AnalyticPredictor(), SPEC_AXES, scale=1.0)
    lifted = dataclasses.replace(
        setting, tpot_targets_ms=(15.0, 25.0, 50.0), derived_targets_ms=setting.tpot_targets_ms
    )
    (line,) = [t for t in lifted.describe() if t.startswith("Derived targets")]
    assert "lifted to 15 / 25 / 50 ms" in line and "fixed-256" in line
    assert not any(t.startswith("Derived targets") for t in setting.describe())
