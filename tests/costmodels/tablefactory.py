"""Small hand-made cost tables for the table tests (not a test module)."""

from __future__ import annotations

import numpy as np

from servecal.costmodels.table import AXES, CostTable, Margin

AXES_SMALL = {"n_decode": [0, 8, 32], "ctx": [0, 1024], "prefix": [0], "chunk": [0, 64, 256, 1024]}


def physics_grid(axes: dict[str, list[int]], scale: float = 1.0) -> np.ndarray:
    n, ctx, p, c = np.meshgrid(*(np.asarray(axes[a], dtype=float) for a in AXES), indexing="ij")
    return scale * (0.35 + 0.9 * (n > 0) + 0.055 * n + 1e-5 * n * ctx + 0.4 * (c > 0) + 0.006 * c)


def small_table(
    rho: float = 0.05,
    energy: bool = True,
    fingerprint: dict | None = None,
    between: str = "linear",
):
    p50 = physics_grid(AXES_SMALL)
    return CostTable(
        axes=AXES_SMALL,
        quantiles={0.5: p50, 0.99: p50 * 1.2},
        margin=Margin(0.99, rho, 0.99, 0.991, 10, 200),
        energy_j=p50 * 0.3 if energy else None,
        fingerprint=fingerprint or {"device_name": "H200", "model_hash": "m1", "date": "x"},
        model={"kind": "test"},
        between=between,
    )
