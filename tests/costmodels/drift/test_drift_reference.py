"""The interpolated median of a cost table, and replay leaving rows beyond its grid out."""

import numpy as np
import pytest

from servecal.costmodels import CostTable
from servecal.costmodels.drift.reference import TableMedian, reference_for
from servecal.costmodels.drift.replay import replay
from servecal.costmodels.table import Margin

N_AXIS = (1, 8, 32)
C_AXIS = (0, 256, 1024)


def table(between: str = "round_up") -> CostTable:
    n, c = np.meshgrid(N_AXIS, C_AXIS, indexing="ij")
    p50 = (1.0 + 0.05 * n + 0.006 * c).reshape(3, 1, 1, 3)
    return CostTable(
        {"n_decode": N_AXIS, "ctx": (0,), "prefix": (0,), "chunk": C_AXIS},
        {0.5: p50, 0.99: p50 * 1.3},
        margin=Margin(quantile=0.99, rho=0.0, target=0.99, validated_coverage=None,
                      calibration_points=1, calibration_rows=1),
        between=between,
    )  # fmt: skip


def test_interpolates_between_grid_points_and_matches_on_them() -> None:
    t = table()
    m = TableMedian(t)
    assert m(8, 256) == pytest.approx(t.predict(8, 256))
    mid = m(20, 640)
    assert mid == pytest.approx(1.0 + 0.05 * 20 + 0.006 * 640)  # exact for a linear truth
    assert mid < t.predict(20, 640)  # the table rounds up, the reference does not
    assert mid == TableMedian(table("linear"))(20, 640) == table("linear").predict(20, 640)
    n = np.array([1, 20, 32, 5])
    c = np.array([0, 640, 1024, 100])
    assert m.many(n, c) == pytest.approx([m(int(a), int(b)) for a, b in zip(n, c, strict=True)])


def test_domain_is_the_grids_hull_on_every_axis() -> None:
    m = TableMedian(table())
    assert m.in_domain(20, 640)  # between grid values: inside
    assert m.in_domain(1, 0) and m.in_domain(32, 1024)  # on the edges: inside
    assert not m.in_domain(8, 300, ctx=4000)  # ctx calibrated at 0 only: beyond its edge
    assert not m.in_domain(64, 300)
    assert not m.in_domain(0, 300)  # below the first n_decode
    assert m.domain_mask(np.array([8, 64, 20]), np.array([300, 300, 640])).tolist() == [
        True,
        False,
        True,
    ]
    assert reference_for(object()) is None


def test_replay_leaves_rows_beyond_the_grid_out() -> None:
    t = table()
    rng = np.random.default_rng(0)
    n = rng.integers(1, 33, 600)
    c = rng.integers(0, 1025, 600)
    beyond = np.arange(600) < 100
    n[beyond] = 100  # outside the grid: the table clamps to n_decode = 32 there
    ms = (1.0 + 0.05 * n + 0.006 * c) * np.exp(0.05 * rng.standard_normal(600))
    ms[beyond] *= 2.0  # and slower than anything the clamped table promises
    import pandas as pd

    frame = pd.DataFrame({"n_decode": n, "chunk": c, "ctx": 0, "prefix": 0, "ms": ms})
    r = replay(t, frame)
    assert r["verdict"] == "valid"
    assert r["outside_domain"]["rows"] == 100
    assert r["checked"] == 500
    assert r["outside_domain"]["coverage"] < 0.5
    assert "extend the calibration grid" in r["recommendation"]
