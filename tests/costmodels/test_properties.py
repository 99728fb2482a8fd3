"""Hypothesis properties: compiled tables are monotone; max_chunk equals brute force;
the JSON round trip is exact."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servecal.costmodels.fit import fit_cost_table
from servecal.costmodels.grid import fill_holes, make_monotone, uncross
from servecal.costmodels.table import AXES, CostTable, Margin

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def axis(max_value: int, max_size: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, max_value), min_size=1, max_size=max_size, unique=True).map(
        sorted
    )


@st.composite
def tables(draw: st.DrawFn) -> CostTable:
    axes = {
        "n_decode": draw(axis(64, 4)),
        "ctx": draw(axis(4096, 3)),
        "prefix": draw(axis(512, 2)),
        "chunk": draw(axis(600, 8)),
    }
    shape = tuple(len(axes[a]) for a in AXES)
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    p50 = make_monotone(rng.gamma(2.0, 2.0, shape))
    p99 = uncross({0.5: p50, 0.99: make_monotone(p50 + rng.gamma(1.0, 1.0, shape))})[0.99]
    rho = draw(st.floats(-0.3, 0.5, allow_nan=False))
    return CostTable(
        axes,
        {0.5: p50, 0.99: p99},
        margin=Margin(0.99, rho, 0.99, None, 1, 100),
        energy_j=p50 * 0.25,
        fingerprint={"device_name": "x"},
        between=draw(st.sampled_from(["linear", "round_up"])),
    )


@FAST
@given(table=tables(), data=st.data())
def test_max_chunk_equals_brute_force(table: CostTable, data: st.DataObject) -> None:
    ax = table.axes
    n = data.draw(st.integers(-2, max(ax["n_decode"]) + 5))
    # the engine asks with the decodes' mean context: a float
    ctx = data.draw(st.one_of(st.integers(0, max(ax["ctx"]) + 10), st.floats(0, 5000)))
    prefix = data.draw(st.integers(0, max(ax["prefix"]) + 10))
    limit = data.draw(st.integers(0, 700))
    use_margin = data.draw(st.booleans())
    q = 0.99 if use_margin else data.draw(st.sampled_from([0.5, 0.99]))

    def cost(c: int) -> float:
        t = table.predict(n, c, ctx, prefix, q=q)
        return t + table.margin(n, c, ctx, prefix) if use_margin else t

    # budgets exactly on achievable costs (ties) as well as in between
    costs = [cost(c) for c in [0, *ax["chunk"], 10_000]]
    budget = data.draw(
        st.one_of(st.sampled_from(costs), st.floats(0.0, max(costs) * 1.2, allow_nan=False))
    )
    brute = max((c for c in range(1, limit + 1) if cost(c) <= budget), default=0)
    assert table.max_chunk(n, ctx, prefix, budget, limit, q=q, use_margin=use_margin) == brute


@FAST
@given(table=tables(), data=st.data())
def test_predictions_never_decrease_along_any_axis(table: CostTable, data: st.DataObject) -> None:
    top = {a: max(v) + 10 for a, v in table.axes.items()}
    point = {a: data.draw(st.floats(-1, top[a])) for a in top}
    axis = data.draw(st.sampled_from(sorted(top)))
    step = data.draw(st.floats(0, 300))
    higher = {**point, axis: point[axis] + step}
    slack = 1e-12  # exact along the chunk; within rounding along the others (weights trade)
    for q in table.quantiles:
        lower = table.predict(**point, q=q)
        assert table.predict(**higher, q=q) >= lower * (1 - (axis != "chunk") * slack)
    if table.margin_info.rho >= 0:
        assert table.margin(**higher) >= table.margin(**point) * (1 - slack)


@FAST
@given(table=tables())
def test_json_round_trip_is_exact(table: CostTable) -> None:
    back = CostTable.from_json(json.loads(table.dumps()))
    assert back.dumps() == table.dumps()
    for q in table.quantiles:
        assert np.array_equal(back.values(q), table.values(q))
    assert back.margin_info == table.margin_info
    assert np.array_equal(back.energy_values(), table.energy_values())


def is_monotone(arr: np.ndarray) -> bool:
    return all((np.diff(arr, axis=k) >= 0).all() for k in range(arr.ndim))


@FAST
@given(
    shape=st.tuples(*(st.integers(1, 5) for _ in range(4))),
    seed=st.integers(0, 2**32 - 1),
    hole_rate=st.floats(0.0, 0.9),
)
def test_fill_then_project_is_monotone(shape, seed: int, hole_rate: float) -> None:
    rng = np.random.default_rng(seed)
    arr = rng.gamma(2.0, 1.0, shape)
    arr[rng.random(shape) < hole_rate] = np.nan
    arr.flat[0] = 1.0  # at least one known cell
    axes = {
        a: sorted(rng.choice(5000, s, replace=False).tolist())
        for a, s in zip(AXES, shape, strict=True)
    }
    out = make_monotone(fill_holes(arr, axes))
    assert np.isfinite(out).all() and is_monotone(out)
    assert np.array_equal(make_monotone(out), out)  # monotone input stays unchanged


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), model=st.sampled_from(["table", "linear"]))
def test_every_compiled_table_is_monotone(seed: int, model: str) -> None:
    """Noisy, non-monotone data still compiles into tables monotone on every axis."""
    rng = np.random.default_rng(seed)
    pts = pd.DataFrame(
        {
            "n_decode": rng.choice([0, 2, 8, 32], 24),
            "chunk": rng.choice([16, 64, 256, 512], 24),
            "ctx": rng.choice([0, 300, 2000], 24),
            "prefix": rng.choice([0, 128], 24),
        }
    ).drop_duplicates()
    rows = pts.loc[pts.index.repeat(12)].reset_index(drop=True)
    rows["ms"] = rng.gamma(2.0, 1.0, len(rows)) + 0.01  # no structure at all
    rows["energy_j"] = rng.gamma(2.0, 0.1, len(rows))
    rows["rep"] = np.tile(np.arange(12), len(pts))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = fit_cost_table(
            rows, {}, model=model, fold_share=0.5, seed=seed, quantiles=(0.5, 0.9)
        ).table
    for q in table.quantiles:
        assert is_monotone(table.values(q))
    assert is_monotone(table.energy_values())
    assert (table.values(0.9) >= table.values(0.5)).all()
