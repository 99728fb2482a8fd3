"""The gate's reference at a calibration's own grid points is the calibration's median
there, not the fit's P50: a smooth fit that misses one of its points by 25% is the fit's
error (calibrate reports it held out), not a drift of the device since it was measured.

Issue 38's real CPU case: a `tiny` calibration validated against its own table was
`undecided` in 2 of 3 quiet-host calibrations, each time on one point whose 20 repeats
lay more than 10% above the piecewise fit. Samples here are drawn, never timed.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from servecal.costmodels.drift.reference import (
    CALIBRATION_MEDIANS,
    MIN_REPEATS,
    TableMedian,
    calibration_medians,
)
from servecal.costmodels.drift.replay import replay
from servecal.costmodels.synthetic import SyntheticTruth, grid_points
from servecal.costmodels.table import CostTable
from servecal.util.errors import InputError

AXES = {"n_decode": [0, 1, 2, 4, 8, 16], "chunk": [0, 16, 32, 64, 128],
        "ctx": [16, 64, 128, 256], "prefix": [0, 32]}  # fmt: skip
TRUTH = SyntheticTruth(decode_attention=2e-5, prefill_attention=1e-6, sigma=0.03)
PROV = {"device_name": "synthetic-cpu", "model": "tiny", "model_hash": "t1"}
#: The point the device runs 25% slower than its neighbours say (a cache edge, say).
ODD = {"n_decode": 4, "chunk": 32, "ctx": 128, "prefix": 0}


def _frame(repeats: int, seed: int = 38):
    points = grid_points(AXES["n_decode"], AXES["chunk"], AXES["ctx"], AXES["prefix"])
    points = points[(points["n_decode"] > 0) | (points["chunk"] > 0)]
    frame = TRUTH.draw(points, repeats, np.random.default_rng(seed))
    odd = np.logical_and.reduce([frame[a] == v for a, v in ODD.items()])
    return frame.assign(ms=np.where(odd, frame["ms"] * 1.25, frame["ms"]))


@pytest.fixture(scope="module")
def fitted() -> tuple[CostTable, object]:
    from servecal.costmodels.fit import fit_cost_table

    frame = _frame(20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = fit_cost_table(frame, PROV, model="linear", seed=0).table
    return table, frame


def _odd_median(frame) -> float:
    odd = np.logical_and.reduce([frame[a] == v for a, v in ODD.items()])
    return float(np.median(frame.loc[odd, "ms"]))


def test_a_fitted_table_keeps_its_calibrations_medians(fitted) -> None:
    table, frame = fitted
    kept = table.validation[CALIBRATION_MEDIANS]
    assert len(kept["points"]) == frame.groupby(list(ODD)).ngroups
    ref = TableMedian(table)
    args = (ODD["n_decode"], ODD["chunk"], ODD["ctx"], ODD["prefix"])
    assert ref(*args) == pytest.approx(_odd_median(frame))
    # the fit misses that point by more than the point tests' ±10%: the premise
    assert table.predict(*args, q=0.5) < 0.9 * _odd_median(frame)
    # vectorised: the same answer at the point, the fit's P50 between points
    many = ref.many(np.array([4, 4]), np.array([32, 48]), np.array([128, 128]), 0)
    assert many[0] == pytest.approx(_odd_median(frame))
    assert many[1] == pytest.approx(table.predict(4, 48, 128, 0, q=0.5), rel=1e-9)


def test_the_calibration_against_its_own_table_is_valid(fitted) -> None:
    table, frame = fitted
    doc = replay(table, frame, kind="samples")
    assert doc["verdict"] == "valid", doc["recommendation"]


def test_without_the_medians_the_fits_own_miss_reads_as_drift(fitted) -> None:
    """The mechanism matters: the same table without them says the point drifted."""
    table, frame = fitted
    bare = table.validation
    del bare[CALIBRATION_MEDIANS]
    stripped = CostTable(
        axes=table.axes, quantiles={q: table.values(q) for q in table.quantiles},
        margin=table.margin_info, fingerprint=table.fingerprint, validation=bare,
    )  # fmt: skip
    assert replay(stripped, frame, kind="samples")["verdict"] != "valid"


def test_the_device_slowed_around_that_point_is_still_drift(fitted) -> None:
    """Slower since the calibration at every chunk of 32, the odd point among them."""
    table, frame = fitted
    slowed = frame.assign(ms=np.where(frame["chunk"] == 32, frame["ms"] * 1.2, frame["ms"]))
    doc = replay(table, slowed, kind="samples")
    assert doc["verdict"] == "drifted", doc["recommendation"]
    (found,) = [reg for reg in doc["regions"] if reg["axis"] == "points"]
    assert found["extent"]["chunk"] == [32, 32]


def test_points_measured_fewer_times_keep_the_fits_p50() -> None:
    kept = calibration_medians(_frame(MIN_REPEATS - 1))
    assert kept["points"] == [] and kept["ms"] == []


class _Edited:
    validation = {CALIBRATION_MEDIANS: {"axes": ["n_decode"], "points": [[1]], "ms": [1.0]}}


def test_malformed_medians_are_one_input_error() -> None:
    from servecal.costmodels.drift.reference import _measured_medians

    with pytest.raises(InputError, match="calibration_medians"):
        _measured_medians(_Edited())
