"""The ``fitted`` predictor: shipped for the device truth, accurate on points it never saw,
honest (not the truth), and fitted + cached for any other truth."""

from __future__ import annotations

import numpy as np
import pytest

from servecal.costmodels.evaluate import evaluate
from servecal.costmodels.table import CostTable
from servecal.sched import experiment as ex
from servecal.sched import fitted_table as fitted
from servecal.sched.device_truth import DeviceTruth
from servecal.sched.policies.registry import PolicySpec
from servecal.sched.truth import AnalyticTruth
from servecal.util.errors import InputError

#: Off-grid shapes over what schedulers visit (log-uniform sizes, a tenth with no decodes
#: or no chunk), never a grid point on every axis: fitted_table.probe_points up to these.
HELD_OUT_UPPER = {"n_decode": 399, "chunk": 5999, "ctx": 11999, "prefix": 7999}


def test_shipped_table_is_the_fit_of_the_shipped_truth() -> None:
    table = CostTable.load(fitted.SHIPPED_PATH)
    key = fitted.fit_key(DeviceTruth.load())
    assert table.fingerprint["fit_key"] == key, (
        "sched/data/device_a100_fitted.json is stale: rerun scripts/fit_device_table.py"
    )
    assert table.fingerprint["truth"] == DeviceTruth.load().describe()
    assert {a: list(v) for a, v in table.axes.items()} == {
        a: list(v) for a, v in fitted.FIT_GRID.items()
    }
    assert fitted.SHIPPED_PATH.stat().st_size < 200_000  # ships in the package


def test_fitted_table_on_held_out_points_is_accurate_and_not_the_truth() -> None:
    truth = DeviceTruth.load()
    table = fitted.fitted_predictor(truth, "fitted")
    grid_only = fitted.fitted_predictor(truth, "fitted-grid")
    rng = np.random.default_rng(161)  # neither a run seed nor the calibration's
    points = fitted.probe_points(rng, 400, HELD_OUT_UPPER)
    rows = truth.draw(points, 20, rng)
    m, g = evaluate(table, rows), evaluate(grid_only, rows)
    assert m["out_of_domain"] == 0
    assert m["p50_mape"] < 0.05  # within a few % of each point's measured median...
    cols = [points[c].to_numpy() for c in points.columns]
    exact = truth.median(*cols)
    p50 = np.asarray(table.predict(*cols))
    err = np.abs(p50 - exact) / exact
    assert 0.002 < err.mean() < 0.05  # ...but it is not the truth: it misses steps
    assert err.max() > 0.05
    # the probe-calibrated margin covers noise and steps off the grid...
    assert m["p99_coverage"] >= 0.97
    assert m["tightness"] < 0.5
    # ...the grid's own margin does not: the steps' edges sit just above its chunks
    assert g["p50_mape"] == m["p50_mape"]  # same quantiles, another margin
    assert g["p99_coverage"] < 0.95
    assert table.margin_info.rho > 5 * grid_only.margin_info.rho


def test_load_predictor_fitted_reads_the_shipped_table_without_fitting(monkeypatch) -> None:
    def no_fit(*_a, **_k):
        raise AssertionError("the shipped truth must not be refitted")

    monkeypatch.setattr(fitted, "fit_table", no_fit)
    for name in ("fitted", "fitted-grid"):
        table = fitted.fitted_predictor(DeviceTruth.load(), name)
        assert isinstance(table, CostTable) and table.margin_info is not None
    with pytest.raises(InputError, match="expected one of fitted, fitted-grid"):
        fitted.fitted_predictor(DeviceTruth.load(), "fitted-best")


def test_another_truth_is_fitted_once_and_cached(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("SERVECAL_CACHE", str(tmp_path))
    small = {"n_decode": (0, 8, 64), "chunk": (0, 128, 1024), "ctx": (0, 1024), "prefix": (0,)}
    monkeypatch.setattr(fitted, "FIT_GRID", small)
    monkeypatch.setattr(fitted, "FIT_REPEATS", 12)
    truth = DeviceTruth.load(sigma=0.05)
    table = fitted.fitted_predictor(truth)
    assert table.fingerprint["fit_key"] == fitted.fit_key(truth)
    cached = list((tmp_path / "fitted").glob("*.json"))
    assert len(cached) == 1

    def no_fit(*_a, **_k):
        raise AssertionError("cached: must not refit")

    monkeypatch.setattr(fitted, "fit_table", no_fit)
    again = fitted.fitted_predictor(truth)
    assert again.to_json()["quantiles"] == table.to_json()["quantiles"]
    # another truth has another key
    assert fitted.fit_key(DeviceTruth.load(sigma=0.06)) != fitted.fit_key(truth)


def test_fitted_needs_a_truth_that_can_draw() -> None:
    with pytest.raises(InputError, match="this truth cannot draw any: use --truth device"):
        fitted.fitted_predictor(AnalyticTruth())


def test_online_numbers_of_a_device_run_are_honest() -> None:
    """Planning on the fitted table against the device truth: errors are neither 0 nor
    large, coverage is high but not 100%."""
    spec = ex.RunSpec(
        workload="mixed",
        policy=PolicySpec.parse("sloweave"),
        tpot_slo_ms=25.0,
        rate=30.0,
        n_requests=300,
        truth="device",
        predictor="fitted",
    )
    online = ex.summarize(spec, ex.run(spec, 0))["online"]
    assert 0.005 < online["p50_mape"] < 0.10
    assert 0.95 < online["p99_coverage"] < 1.0
