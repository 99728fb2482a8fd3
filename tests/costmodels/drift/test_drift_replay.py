"""Replay: a fresh calibration at the table's conditions is valid; slowed 10% it drifted."""

import warnings

import numpy as np
import pandas as pd
import pytest

from servecal.costmodels.drift.replay import load_measurements, replay
from servecal.costmodels.errors import InputError
from servecal.costmodels.synthetic import SyntheticTruth, grid_points

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
    assert r["alarms"] == [] and r["regions"] == []
    assert r["factor"] == pytest.approx(1.0, abs=0.03)
    assert r["coverage"] > 0.98


def test_slowed_ten_percent_drifted_with_size(table) -> None:
    r = replay(table, fresh(1.10))
    assert r["verdict"] == "drifted"
    assert r["alarms"][0]["detector"] == "slowdown"
    assert r["factor"] == pytest.approx(1.10, abs=0.04)
    assert "recalibrate" in r["recommendation"]


def test_run_folder_is_replayed_in_time_order(table, tmp_path) -> None:
    f = fresh().sample(frac=1.0, random_state=3).reset_index(drop=True)  # a run mixes points
    f["ms"] *= np.where(np.arange(len(f)) >= len(f) // 2, 1.2, 1.0)
    run = f.rename(columns={"ms": "duration_ms"}).assign(start_ms=np.arange(len(f)) * 5.0)
    run.to_parquet(tmp_path / "iterations.parquet")
    frame, kind = load_measurements(tmp_path)
    assert kind == "run"
    r = replay(table, frame, kind)
    assert r["verdict"] == "drifted"
    assert r["alarms"][0]["index"] >= len(f) // 2
    assert r["alarms"][0]["time_ms"] == pytest.approx(5.0 * r["alarms"][0]["index"])


def test_bad_measurements_are_input_errors(table, tmp_path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_measurements(tmp_path / "missing.parquet")
    with pytest.raises(InputError, match="not a run folder"):
        load_measurements(tmp_path)
    with pytest.raises(InputError, match="at least"):
        replay(table, fresh().head(5))
