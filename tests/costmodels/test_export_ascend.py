"""``--format vllm-ascend`` read by vllm-ascend v0.23.0's own rules.

The reader (``BudgetRefiner``, ``vllm_ascend/core/scheduler_dynamic_batch.py`` at tag
v0.23.0) is re-implemented in :mod:`consumer_ascend`, its Python-set key alignment and
its miss fallback included. Every written row's ``(ctx_len, d_num)`` is looked up through
it, at the key and at contexts between keys, and the budget it hands vLLM must never be
larger than the table allows for that batch: ``d_num`` plus the longest written prefill
whose bound at the batch's own context is within the SLO limit (``d_num`` when none is).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from consumer_ascend import BudgetRefiner
from tablefactory import small_table
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels.export import export_table
from servecal.costmodels.export_ascend import COLUMNS
from servecal.costmodels.table import AXES, CostTable, Margin
from servecal.sched.fitted_table import SHIPPED_PATH

#: A default budget no table reaches: a budget equal to it is the reader's fallback.
FALLBACK = 10**7
runner = CliRunner()


def written_cost(table: CostTable, d: np.ndarray, p: np.ndarray, ctx: float) -> np.ndarray:
    """What the file's ``cost`` stands for, at any context: the bound, or the P50."""
    v = np.full(d.shape, float(ctx))
    if table.margin_info is not None:
        return np.asarray(table.lookup_bound(d, p, v, 0), dtype=float)
    return np.asarray(table.lookup(0.5, d, p, v, 0)[0], dtype=float)


def allowed_budgets(table, ctx, top_d, p_lens, slo, cap=None) -> np.ndarray:
    """Per d_num 1..top_d: d + the longest written p_len within ``slo`` at ``ctx``."""
    d, p = (a.ravel() for a in np.meshgrid(np.arange(1, top_d + 1), p_lens, indexing="ij"))
    ok = written_cost(table, d, p, ctx) <= slo
    if cap is not None:
        ok &= p + d <= cap
    best = np.where(ok, p, -1).reshape(top_d, len(p_lens)).max(axis=1)
    return np.arange(1, top_d + 1) + np.maximum(best, 0)


def query_contexts(keys: list[int]) -> list[float]:
    """Each key, just below it, halfway to the previous one, and one token."""
    out = {1.0}
    for lo, hi in zip(keys, keys[1:], strict=False):
        out |= {float(hi), hi - 0.5, (lo + hi) / 2}
    out.add(float(keys[0]))
    return sorted(v for v in out if v >= 1.0 or v == keys[0])


def check_every_row(table: CostTable, csv: Path, slo: float, cap: int | None = None) -> int:
    """The reader on every written row; returns how many rows it checked."""
    frame = pd.read_csv(csv)
    assert tuple(frame.columns) == COLUMNS
    assert (frame["chunk_size"] == frame["p_len"] + frame["d_num"]).all()
    reader = BudgetRefiner(csv, slo, default_budget=FALLBACK)
    pairs = set(zip(frame["ctx_len"], frame["d_num"], strict=True))
    assert set(reader.lookup) == pairs  # every pair has a row under any limit > 0
    keys = sorted(frame["ctx_len"].unique().tolist())
    top_d = int(frame["d_num"].max())
    assert sorted(frame["d_num"].unique().tolist()) == list(range(1, top_d + 1))  # dense
    p_lens = np.sort(frame["p_len"].unique())
    # each row: the cost is at least the table's at its context (rounded up)
    measured = frame[frame["cost"] > 0]
    for k in keys:
        rows = measured[measured["ctx_len"] == k]
        d, p = rows["d_num"].to_numpy(), rows["p_len"].to_numpy()
        assert (rows["cost"].to_numpy() >= written_cost(table, d, p, k)).all()
    # each row: the reader's budget at its own key covers it when it is within the limit
    lookup = pd.Series(reader.lookup)
    budget = lookup.loc[list(zip(frame["ctx_len"], frame["d_num"], strict=True))].to_numpy()
    within = (frame["cost"] <= slo).to_numpy()
    assert (budget[within] >= frame["chunk_size"].to_numpy()[within]).all()
    # each row's (ctx_len, d_num), looked up at and between the keys, never over-budgets
    for ctx in query_contexts(keys):
        allowed = allowed_budgets(table, ctx, top_d, p_lens, slo, cap)
        got = np.asarray([reader.max_budget(ctx, d) for d in range(1, top_d + 1)])
        assert (got != FALLBACK).all() and reader.misses == 0
        over = np.flatnonzero(got > allowed)
        assert over.size == 0, (
            f"ctx {ctx}, d_num {over[0] + 1}: reader budget {got[over[0]]} > "
            f"table's {allowed[over[0]]} at slo {slo}"
        )
    return len(frame)


def export_csv(table: CostTable, path: Path, cap: int | None = None) -> Path:
    export_table(table, path, "vllm-ascend", max_num_batched_tokens=cap)
    return path


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> tuple[CostTable, Path]:
    table = CostTable.load(SHIPPED_PATH)
    return table, export_csv(table, tmp_path_factory.mktemp("ascend") / "profile_table.csv")


# -- the reader's own behaviour, as re-implemented ----------------------------------------
def test_the_readers_set_order_maps_three_decodes_to_a_far_key() -> None:
    """vllm-ascend 0.23's alignment over a set: a sparse d_num axis sends 3 decodes to
    the 32-decode key (the issue's case), a dense one to 3."""
    sparse = set(sorted({0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512}))
    assert BudgetRefiner.align_key(3, sparse) == 32
    assert BudgetRefiner.align_key(3, set(sorted(range(1, 513)))) == 3


def test_a_sparse_file_without_floor_rows_fails_the_check(shipped, tmp_path: Path) -> None:
    """The file servecal wrote before (grid d_num, no floor rows): at 10 ms the reader
    misses 23 of the shipped table's 88 (ctx_len, d_num) pairs, and the check says so."""
    table, _ = shipped
    axes = table.axes
    every_16 = np.union1d(axes["chunk"], np.arange(0, axes["chunk"][-1] + 1, 16))
    grid = np.meshgrid(axes["ctx"], axes["n_decode"], every_16, indexing="ij")
    ctx, dnum, plen = (a.ravel() for a in grid)
    keep = dnum + plen > 0
    ctx, dnum, plen = ctx[keep], dnum[keep], plen[keep]
    old = pd.DataFrame({"chunk_size": plen + dnum, "p_len": plen, "d_num": dnum, "ctx_len": ctx,
                        "cost": np.round(table.lookup_bound(dnum, plen, ctx, 0), 4)})  # fmt: skip
    old.to_csv(tmp_path / "old.csv", index=False)
    reader = BudgetRefiner(tmp_path / "old.csv", 10.0, default_budget=FALLBACK)
    assert len(axes["ctx"]) * len(axes["n_decode"]) - len(reader.lookup) == 23
    with pytest.raises(AssertionError):
        check_every_row(table, tmp_path / "old.csv", 10.0)


# -- the written files ---------------------------------------------------------------------
@pytest.mark.parametrize("slo", [10.0, 30.0])
def test_shipped_table_every_row_through_the_reader(shipped, slo: float) -> None:
    table, csv = shipped
    assert check_every_row(table, csv, slo) == len(pd.read_csv(csv))


@pytest.mark.parametrize("slo", [1.0, 2.0, 3.0, 5.0, 8.0, 1e6])
def test_small_table_every_row_through_the_reader(tmp_path: Path, slo: float) -> None:
    table = small_table()
    check_every_row(table, export_csv(table, tmp_path / "p.csv"), slo)


def test_median_table_every_row_through_the_reader(tmp_path: Path) -> None:
    t = small_table()
    only = CostTable(axes=t.axes, quantiles={0.5: t.values(0.5)}, fingerprint={})
    for slo in (2.0, 4.0):
        check_every_row(only, export_csv(only, tmp_path / "p.csv"), slo)


def test_capped_rows_stay_under_max_num_batched_tokens(tmp_path: Path) -> None:
    table = small_table()
    csv = export_csv(table, tmp_path / "p.csv", cap=300)
    assert pd.read_csv(csv)["chunk_size"].max() <= 300
    for slo in (3.0, 1e6):
        check_every_row(table, csv, slo, cap=300)


def random_table(rng: np.random.Generator) -> CostTable:
    """Random grids and random times, rising along every axis (a CostTable refuses a
    table that falls along one)."""
    axes = {
        "n_decode": [0] + sorted(rng.choice(np.arange(1, 40), rng.integers(1, 4), False)),
        "ctx": sorted(rng.choice(np.arange(0, 5000, 7), rng.integers(1, 5), False)),
        "prefix": [0],
        "chunk": [0] + sorted(rng.choice(np.arange(1, 700), rng.integers(1, 4), False)),
    }
    axes = {k: [int(x) for x in v] for k, v in axes.items()}
    shape = tuple(len(axes[a]) for a in AXES)
    p50 = rng.uniform(0.5, 3.0, shape)
    for axis in range(4):
        p50 = np.cumsum(p50, axis=axis) if shape[axis] > 1 else p50
    spread = rng.uniform(1.0, 2.0)
    return CostTable(axes, {0.5: p50, 0.99: p50 * spread},
                     Margin(0.99, float(rng.uniform(0, 0.2)), 0.99, None, 1, 1))  # fmt: skip


def test_random_tables_every_row_through_the_reader(tmp_path: Path) -> None:
    rng = np.random.default_rng(20261202)
    for i in range(30):
        table = random_table(rng)
        csv = export_csv(table, tmp_path / f"p{i}.csv")
        check_every_row(table, csv, float(rng.uniform(1.0, 30.0)))


def test_beyond_the_table_the_reader_falls_back(tmp_path: Path) -> None:
    """What the format cannot express (docs/export.md): more decodes than the table's
    largest n_decode, or a context past its last key, get max_num_batched_tokens."""
    csv = export_csv(small_table(), tmp_path / "p.csv")
    reader = BudgetRefiner(csv, 5.0, default_budget=FALLBACK)
    assert reader.max_budget(100.0, 33) == FALLBACK
    assert reader.max_budget(1025.0, 8) == FALLBACK
    assert reader.refine_budget([], 2048) == 2048  # no decodes: left alone
    assert reader.max_budget(1024.0, 32) < FALLBACK


def test_cli_writes_the_profile_and_says_what_it_cannot_cover(tmp_path: Path) -> None:
    small_table().save(tmp_path / "t.json")
    out = tmp_path / "profile_table.csv"
    r = runner.invoke(app, ["export", str(tmp_path / "t.json"), "--format", "vllm-ascend",
                            "--out", str(out), "--max-num-batched-tokens", "512"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "--max-num-seqs <= 32" in r.output and "floor row" in r.output
    assert pd.read_csv(out)["chunk_size"].max() <= 512
    r = runner.invoke(app, ["export", str(tmp_path / "t.json"), "--format", "vllm-ascend",
                            "--out", str(out), "--max-num-batched-tokens", "0"])  # fmt: skip
    assert r.exit_code == 2 and r.output.count("\n") == 1
