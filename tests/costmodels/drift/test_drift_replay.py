"""Replay: a fresh calibration at the table's conditions is valid; slowed 10% it drifted."""

import warnings

import numpy as np
import pandas as pd
import pytest

from servecal.costmodels.drift.replay import load_measurements, replay
from servecal.costmodels.synthetic import SyntheticTruth, grid_points
from servecal.util.errors import InputError

TRUTH = SyntheticTruth(sigma=0.05, spike_prob=0.003)
POINTS = grid_points([0, 1, 4, 16, 64], [0, 64, 256, 1024, 2048], [0, 512], [0])


@pytest.fixture(scope="module")
def table():
    from servecal.costmodels.fit import fit_cost_table

    frame = TRUTH.draw(POINTS, 20, np.random.default_rng(1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit_cost_table(frame, {"source": "synthetic"}, seed=0).table


def fresh(factor: float = 1.0) -> pd.DataFrame:
    frame = TRUTH.draw(POINTS, 20, np.random.default_rng(7))
    frame["ms"] *= factor
    return frame


def test_same_conditions_valid(table) -> None:
    r = replay(table, fresh())
    assert r["verdict"] == "valid"
    assert not any(t["rejected"] for t in r["tests"])
    assert all(reg["status"] != "drift" for reg in r["regions"]) and r["recalibrate"] == []
    assert r["factor"] == pytest.approx(1.0, abs=0.03)
    assert r["coverage"] > 0.98
    assert r["false_alarm_bound"] == 0.01
    assert r["checked"] == r["rows"] == len(fresh()) and r["points"] == len(POINTS)
    assert r["stability"]["stable"]


def test_slowed_ten_percent_drifted_with_size(table) -> None:
    r = replay(table, fresh(1.10))
    assert r["verdict"] == "drifted"
    slowdown = next(t for t in r["tests"] if t["test"] == "slowdown")
    assert slowdown["rejected"] and slowdown["p_value"] < 1e-6
    assert r["factor"] == pytest.approx(1.10, abs=0.04)
    assert "recalibrate the whole table" in r["recommendation"]


def test_one_region_slowed_is_named(table) -> None:
    """Named three times: from the data (the points that reject alone, and their extent
    on each axis; the half-space whose pooled rows reject) and by the fixed band whose
    test rejects."""
    frame = fresh()
    long_prefill = frame["chunk"] >= 1024
    frame.loc[long_prefill, "ms"] *= 1.2
    r = replay(table, frame)
    assert r["verdict"] == "drifted"
    moved = [reg for reg in r["regions"] if reg["status"] == "drift"]
    assert [reg["axis"] for reg in moved] == ["points", "half-space", "chunk"]
    found, half, band = moved
    assert half["region"] == "slowdown in half-space chunk 1024+"
    assert found["extent"]["chunk"] == [1024, 2048]  # exactly the slowed points' edge
    # the points that reject alone (beyond ±10% on their own 20 repeats) lie in it
    assert 0 < found["points"] <= found["points_in_extent"] == 20
    assert band["region"] == "chunk 1024+"
    for reg in moved:
        assert reg["direction"] == "slowdown"
        assert reg["factor"] == pytest.approx(1.2, abs=0.03)
    grid = {"n_decode": [0, 64], "chunk": [1024, 2048], "ctx": [0, 512], "prefix": [0, 0]}
    assert r["recalibrate"] == [grid, grid, grid]
    assert r["recommendation"].startswith("recalibrate slowdown at")


def test_run_folder_is_checked_by_grid_box(table, tmp_path) -> None:
    f = fresh().sample(frac=1.0, random_state=3).reset_index(drop=True)  # a run mixes points
    f["ms"] *= np.where(np.arange(len(f)) >= len(f) // 2, 1.2, 1.0)
    run = f.rename(columns={"ms": "duration_ms"}).assign(start_ms=np.arange(len(f)) * 5.0)
    run.to_parquet(tmp_path / "iterations.parquet")
    frame, kind = load_measurements(tmp_path)
    assert kind == "run"
    r = replay(table, frame, kind)
    assert r["unit"] == "grid box"
    assert r["verdict"] == "drifted"
    assert 1.05 < r["factor"] < 1.2


def test_a_served_engines_warm_up_steps_are_not_evidence(table, tmp_path) -> None:
    """The plug-in's log numbers steps from the engine's start; its first steps are the
    engine's warm-up (a served CPU engine's first ran 17 and 9 ms beside a 5 ms median)
    and are dropped, as calibration drops its own warm-up repeats. A run without step
    numbers (a simulated one) keeps every row."""
    from servecal.costmodels.drift.replay import WARMUP_STEPS

    f = fresh().rename(columns={"ms": "duration_ms"}).assign(start_ms=lambda d: d.index * 5.0)
    f.loc[: WARMUP_STEPS - 1, "duration_ms"] *= 50  # cold first steps
    f.to_parquet(tmp_path / "iterations.parquet")
    unnumbered, _ = load_measurements(tmp_path)
    assert len(unnumbered) == len(f)
    f.assign(step=np.arange(len(f))).to_parquet(tmp_path / "iterations.parquet")
    served, kind = load_measurements(tmp_path)
    assert len(served) == len(f) - WARMUP_STEPS
    np.testing.assert_array_equal(served["ms"], unnumbered["ms"].iloc[WARMUP_STEPS:])
    assert replay(table, served, kind)["rows"] == len(f) - WARMUP_STEPS


def test_run_folder_with_bad_values_is_refused(tmp_path) -> None:
    f = fresh().rename(columns={"ms": "duration_ms"})
    for column, value in (("duration_ms", np.nan), ("n_decode", -1), ("ctx", np.inf)):
        bad = f.copy()
        bad[column] = bad[column].astype(float)
        bad.loc[3, column] = value
        bad.to_parquet(tmp_path / "iterations.parquet")
        with pytest.raises(InputError, match=f"'{column}', row 3"):
            load_measurements(tmp_path)
    f.assign(duration_ms=f["duration_ms"] > 1).to_parquet(tmp_path / "iterations.parquet")
    with pytest.raises(InputError, match="numeric"):
        load_measurements(tmp_path)


def test_context_and_prefix_reach_the_monitor() -> None:
    """A truth whose cost grows with ctx and prefix, replayed against its own exact
    table: valid. (The monitor once got neither, priced every row at ctx = prefix =
    0 and called a true table drifted.)"""
    from servecal.costmodels.table import AXES, CostTable, Margin

    truth = SyntheticTruth(decode_attention=2e-5, prefill_attention=2e-7, sigma=0.05,
                           spike_prob=0.0)  # fmt: skip
    grid = {"n_decode": [0, 1, 8, 32], "ctx": [0, 2048, 8192], "prefix": [0, 4096],
            "chunk": [0, 1, 256, 1024]}  # fmt: skip
    mesh = np.meshgrid(*(np.asarray(grid[a], dtype=float) for a in AXES), indexing="ij")
    p50 = truth.median(mesh[0], mesh[3], mesh[1], mesh[2])
    table = CostTable(grid, {0.5: p50, 0.99: p50 * np.exp(2.326 * 0.05)},
                      Margin(0.99, 0.02, 0.99, None, 1, 1))  # fmt: skip
    points = grid_points([1, 8, 32], [0, 256, 1024], [2048, 8192], [0, 4096])
    rows = truth.draw(points, 20, np.random.default_rng(5))
    assert replay(table, rows)["verdict"] == "valid"
    assert replay(table, rows.assign(ms=rows["ms"] * 1.15))["verdict"] == "drifted"


def test_bad_measurements_are_input_errors(table, tmp_path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_measurements(tmp_path / "missing.parquet")
    with pytest.raises(InputError, match="not a run folder"):
        load_measurements(tmp_path)
    with pytest.raises(InputError, match="at least"):
        replay(table, fresh().head(5))
    beyond = fresh().assign(n_decode=1000)
    with pytest.raises(InputError, match="nothing to check"):
        replay(table, beyond)


def test_a_median_only_table_is_checked_on_its_median() -> None:
    from servecal.costmodels.fit import fit_cost_table

    medians = TRUTH.draw(POINTS, 1, np.random.default_rng(3))  # importer-style: rep 0 only
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = fit_cost_table(medians, {"source": "medians"}, seed=0).table
    assert table.tail is None
    r = replay(table, fresh())
    assert r["verdict"] == "valid" and r["coverage"] is None
    assert [t["test"] for t in r["tests"] if t["scope"] == "all"] == ["slowdown", "speedup"]
    assert all(reg["coverage"] is None for reg in r["regions"])
    assert replay(table, fresh(1.2))["verdict"] == "drifted"
