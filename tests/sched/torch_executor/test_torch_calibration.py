"""The ``paged`` calibration layout: the executor's pass on a moving, ragged decode group."""

import json

import numpy as np
import pytest
import torch
from torchkit import TINY, tiny_model
from typer.testing import CliRunner

from servecal.cli import app
from servecal.profiler.design import Point
from servecal.profiler.runner import MeasureConfig, measure_block
from servecal.profiler.timing import CpuClock, LayerScale
from servecal.sched.torch_executor.calibration import PagedLayout, ragged_lengths
from servecal.sched.torch_executor.pool import PagedKVPool, PoolConfig, _grown

runner = CliRunner()
GRID = {"n_decode": [0, 2, 4], "chunk": [0, 16], "ctx": [16, 64], "prefix": [0, 32]}


@pytest.mark.parametrize(("n", "ctx"), [(1, 100), (2, 64), (5, 128), (24, 2048)])
def test_ragged_lengths_spread_around_ctx_longest_first(n, ctx):
    lengths = ragged_lengths(n, ctx, 0.5)
    assert len(lengths) == n and lengths == sorted(lengths, reverse=True)
    assert abs(np.mean(lengths) - ctx) <= 0.5
    assert min(lengths) >= round(ctx * 0.5) and max(lengths) <= round(ctx * 1.5)
    assert ragged_lengths(n, ctx, 0.0) == [ctx] * n


def test_a_paged_point_decodes_on_changes_its_group_and_keeps_its_mean_context():
    layout = PagedLayout(block_size=4, change_every=3, cycle=8)
    point = Point(4, 8, 40, 16)
    prepared = layout.prepare(tiny_model(), point)
    start_rids, start_lengths = list(prepared.rids), list(prepared.lengths)
    clock, seen, means = CpuClock(), [], []
    for step in range(1, 2 * layout.cycle + 1):
        before = list(prepared.rids)
        segments = prepared.time(clock)
        assert len(segments) == 3 and all(ms >= 0 for ms in segments)
        pool = prepared.pool
        assert pool.used_tokens == sum(prepared.lengths) + point.prefix  # the chunk re-runs
        assert pool.used_blocks <= pool.n_blocks
        changed = sum(a != b for a, b in zip(before, prepared.rids, strict=True))
        if step % layout.cycle == 0:  # back to the start lengths, all newcomers
            assert prepared.lengths == start_lengths and changed == 4
        else:
            assert changed == (1 if step % layout.change_every == 0 else 0)
            assert prepared.lengths == [n + step % layout.cycle for n in start_lengths]
        seen += prepared.rids
        means.append(np.mean(prepared.lengths))
    assert set(start_rids) < set(seen)
    # over a cycle the group's mean length is the point's ctx (± half a step)
    assert abs(np.mean(means[: layout.cycle]) - point.ctx) <= 1.0


def test_measure_block_times_the_layout_it_is_given():
    model = tiny_model()
    points = [Point(2, 0, 32, 0), Point(0, 16, 0, 0), Point(3, 16, 48, 32)]
    rows = measure_block(
        model,
        points,
        LayerScale(len(model.layers), TINY.n_layers),
        MeasureConfig(repeats=4, warmup=1, block=3),
        CpuClock(),
        None,
        np.random.default_rng(0),
        layout=PagedLayout(block_size=8),
    )
    for point, got in zip(points, rows, strict=True):
        assert isinstance(got, list) and len(got) == 4
        assert all(r["ms"] > 0 and r["n_decode"] == point.n_decode for r in got)


def test_view_buffers_grow_by_half_at_least_and_presize_holds_the_widest_group():
    buf = torch.zeros(100)
    assert _grown(None, 10) == 10 and _grown(buf, 101) == 150 and _grown(buf, 400) == 400
    pool = PagedKVPool(TINY, 2, PoolConfig(256, 16, 8))
    pool.presize_views(rows=3, keys=80)
    before = {name: t.data_ptr() for name, t in pool._views_storage.items()}
    assert len(before) == 2 * 2 * 2  # layers × parities × (k, v)
    shape = (3, TINY.n_kv_heads, 80, TINY.head_dim)
    pool.view_buffer("k", 1, 0, shape)  # fits: no new allocation
    assert {n: t.data_ptr() for n, t in pool._views_storage.items()} == before


@pytest.fixture(scope="module")
def paged_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("paged")
    (root / "grid.json").write_text(json.dumps(GRID))
    out = root / "cal"
    args = ["calibrate", "--device", "cpu", "--model", "tiny", "--grid", str(root / "grid.json"),
            "--repeats", "3", "--threads", "1", "--no-fit", "--kv-layout", "paged",
            "--out", str(out)]  # fmt: skip
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return out


def test_a_paged_calibration_records_its_layout(paged_run):
    fp = json.loads((paged_run / "samples.fingerprint.json").read_text())
    assert fp["kv_layout"] == "paged"
    plan = json.loads((paged_run / "shards" / "plan.json").read_text())
    assert plan["kv_layout"] == "paged"


def test_resume_with_another_layout_is_refused(paged_run):
    args = ["calibrate", "--out", str(paged_run), "--resume", "--kv-layout", "contiguous"]
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "different kv_layout" in res.output


def test_an_unknown_layout_is_a_one_line_error(tmp_path):
    res = runner.invoke(app, ["calibrate", "--out", str(tmp_path / "x"), "--kv-layout", "ring"])
    assert res.exit_code == 2 and "--kv-layout must be one of contiguous, paged" in res.output
    assert not (tmp_path / "x").exists()
