"""Hole filling and the monotone projection on a physics-shaped grid."""

from __future__ import annotations

import numpy as np
import pytest

from servecal.costmodels.grid import fill_holes, make_monotone, settle_empty_iteration
from servecal.costmodels.table import AXES

AXES_G = {"n_decode": [0, 1, 2, 4, 8], "ctx": [0], "prefix": [0], "chunk": [0, 16, 32, 64, 128]}


def truth() -> np.ndarray:
    n, _, _, c = np.meshgrid(*(np.asarray(AXES_G[a], float) for a in AXES), indexing="ij")
    return 0.35 + (n > 0) * (0.9 + 0.055 * n) + (c > 0) * (0.4 + 0.006 * c)


@pytest.mark.parametrize(
    "cell",
    [(0, 0, 0, 1), (1, 0, 0, 0), (2, 0, 0, 2), (4, 0, 0, 4), (0, 0, 0, 4), (4, 0, 0, 0)],
)
def test_a_held_out_cell_is_filled_from_its_own_regime(cell: tuple[int, ...]) -> None:
    t = truth()
    arr = t.copy()
    arr[cell] = np.nan
    arr[0, 0, 0, 0] = np.nan  # n_decode = chunk = 0: never measured
    filled = fill_holes(arr, AXES_G)
    assert filled[cell] == pytest.approx(t[cell], rel=0.02)  # linear inside a regime


def test_empty_iteration_cell_cannot_lift_real_cells() -> None:
    t = truth()
    arr = t.copy()
    arr[0, 0, 0, 0] = np.nan
    out = make_monotone(settle_empty_iteration(fill_holes(arr, AXES_G), AXES_G))
    assert np.array_equal(out[arr == arr], t[arr == arr])  # every measured cell unchanged
    assert out[0, 0, 0, 0] <= min(t[0, 0, 0, 1], t[1, 0, 0, 0])
