"""evaluate(): exact keys and the definitions of the issue, on a hand-made table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tablefactory import small_table

from servecal.costmodels.evaluate import METRIC_KEYS, evaluate
from servecal.costmodels.export import export_table, long_form


def rows(table, n: int, c: int, ms: list[float]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "n_decode": n,
            "chunk": c,
            "ctx": 0,
            "prefix": 0,
            "ms": ms,
            "energy_j": np.nan,
            "rep": range(len(ms)),
        }  # fmt: skip
    )


def test_keys_and_definitions() -> None:
    t = small_table(rho=0.1)
    p50, p99 = t.predict(8, 64), t.predict(8, 64, q=0.99)
    bound = p99 + t.margin(8, 64)
    # point A: median exactly 1.1 x P50; point B (out of domain): median = P50
    a = rows(t, 8, 64, [p50 * 1.1, p50 * 1.1, bound * 2])
    b = rows(t, 64, 64, [t.predict(32, 64)] * 2)
    m = evaluate(t, pd.concat([a, b], ignore_index=True))
    assert tuple(m) == METRIC_KEYS
    assert m["rows"] == 5 and m["out_of_domain"] == 2 and m["checked"] == 3
    assert m["p50_mape"] == pytest.approx((0.1 / 1.1 + 0.0) / 2)  # per point, not per row
    assert m["p99_coverage"] == pytest.approx(4 / 5)
    ms = np.array([p50 * 1.1, p50 * 1.1, bound * 2])
    assert set(m["pinball"]) == {0.5, 0.99}
    b_bound = t.predict(32, 64, q=0.99) + t.margin(32, 64)
    tight = np.r_[bound / ms - 1, [b_bound / t.predict(32, 64) - 1] * 2]
    assert m["tightness"] == pytest.approx(tight.mean())
    assert t.out_of_domain == 0  # offline evaluation does not count as queries


def test_long_form_export(tmp_path: Path) -> None:
    t = small_table(rho=0.1)
    frame = long_form(t)
    assert list(frame.columns) == ["n_decode", "ctx", "prefix", "chunk", "p50", "p99",
                                   "margin", "bound", "energy_j"]  # fmt: skip
    assert len(frame) == 3 * 2 * 1 * 4
    row = frame[(frame.n_decode == 8) & (frame.chunk == 256) & (frame.ctx == 1024)].iloc[0]
    assert row.bound == t.predict(8, 256, 1024, q=0.99) + t.margin(8, 256, 1024)
    assert export_table(t, tmp_path / "t.parquet", "parquet").rows == len(frame)
    back = pd.read_parquet(tmp_path / "t.parquet")
    assert back.equals(frame)
