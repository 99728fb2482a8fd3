"""Importers reproduce hand-computed sums of profile rows (slices in tests/data/profiler)."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels.samples import read_samples
from servecal.costmodels.table import CostTable
from servecal.profiler.design import Grid
from servecal.profiler.importers import import_profile
from servecal.profiler.importers.collective import CommOptions
from servecal.profiler.importers.vidur import (
    decode_features,
    fit_linear,
    parse_attention_samples,
    prefill_features,
)
from servecal.profiler.shapes import ModelShape
from servecal.util.errors import InputError

DATA = Path(__file__).parents[1] / "data" / "profiler"
AIC = DATA / "aiconfigurator"
VIDUR = DATA / "vidur"
# Dimensions that sit on aiconfigurator's GEMM grid, so every read is a table row.
ON_GRID = ModelShape(
    "on-grid",
    n_layers=2,
    hidden=4096,
    n_heads=32,
    n_kv_heads=8,
    head_dim=128,
    intermediate=8192,
    vocab=16384,
)
GRID = Grid(n_decode=(0, 8, 16), chunk=(0, 32, 512, 1024), ctx=(255, 1023), prefix=(0, 768))


def aic_tables():
    gemm = pd.read_csv(next(AIC.glob("*gemm*")))
    gen = pd.read_csv(next(AIC.glob("*generation*")))
    ctx = pd.read_csv(next(AIC.glob("*context*")))
    return gemm, gen, ctx


def g(gemm, m, n, k):
    (value,) = gemm[(gemm.m == m) & (gemm.n == n) & (gemm.k == k)].latency
    return value


def row(frame, n, c, ctx, p):
    sel = frame[
        (frame.n_decode == n) & (frame.chunk == c) & (frame.ctx == ctx) & (frame.prefix == p)
    ]
    assert len(sel) == 1
    return sel.iloc[0]


def test_aiconfigurator_rows_are_hand_computed_sums():
    frame, prov = import_profile("aiconfigurator", AIC, ON_GRID, 1, GRID, pointwise=False)
    gemm, gen, ctx = aic_tables()
    ctx1 = ctx[ctx.batch_size == 1].set_index("isl").latency

    def linear(t):
        return (
            g(gemm, t, 6144, 4096)
            + g(gemm, t, 4096, 4096)
            + g(gemm, t, 16384, 4096)
            + g(gemm, t, 4096, 8192)
        )

    def decode(b, step):
        (value,) = gen[(gen.batch_size == b) & (gen.step == step)].latency
        return value

    # 8 decodes at KV 1023: 2 layers × (GEMMs on 8 tokens + decode attention) + head on 8 rows.
    a = row(frame, 8, 0, 1023, 0)
    assert a.ms == pytest.approx(2 * (linear(8) + decode(8, 1023)) + g(gemm, 8, 16384, 4096))
    # A 1024-token prefill: GEMMs on 1024 tokens + attention at isl 1024; head on 1 row.
    b = row(frame, 0, 1024, 0, 0)
    assert b.ms == pytest.approx(2 * (linear(1024) + ctx1[1024]) + g(gemm, 1, 16384, 4096))
    # 512 tokens after 768 cached: the causal work of a 1024-token prompt (512²+2·512·768=1024²).
    c = row(frame, 0, 512, 0, 768)
    assert c.op_attn_prefill_ms == pytest.approx(2 * ctx1[1024])
    # Mixed: 16 decodes at 255 + 32-token chunk = 48 tokens; head on 17 rows, between m=16 and 32.
    # One flattened forward; attention one varlen kernel (a graph engine, the default): the
    # prefill part less one kernel's fixed cost, the fastest profiled prompt's time.
    d = row(frame, 16, 32, 255, 0)
    head = g(gemm, 16, 16384, 4096) + (g(gemm, 32, 16384, 4096) - g(gemm, 16, 16384, 4096)) / 16
    launch = ctx1.min()
    assert d.op_attn_prefill_ms == pytest.approx(2 * (ctx1[32] - launch))
    assert d.ms == pytest.approx(2 * (linear(48) + decode(16, 255) + ctx1[32] - launch) + head)
    assert (
        prov["engine"] == "graph"
        and "attention: varlen; token padding: none" in prov["step_composition"]
    )
    assert (frame.rep == 0).all() and frame.energy_j.isna().all()
    assert "interpolation" in prov and prov["rows"].startswith("medians")


def test_aiconfigurator_interpolates_and_scales_between_and_beyond_profiled_sizes():
    shape = ModelShape.from_name("llama-3-8b")
    grid = Grid(n_decode=(8,), chunk=(0,), ctx=(1023,), prefix=(0,))
    frame, prov = import_profile("aiconfigurator", AIC, shape, 1, grid, pointwise=False)
    gemm, gen, _ = aic_tables()
    up = g(gemm, 8, 16384, 4096) + (g(gemm, 8, 65536, 4096) - g(gemm, 8, 16384, 4096)) * (
        (28672 - 16384) / (65536 - 16384)
    )
    down = g(gemm, 8, 4096, 12288) + (g(gemm, 8, 4096, 16384) - g(gemm, 8, 4096, 12288)) * 0.5
    linear = g(gemm, 8, 6144, 4096) + g(gemm, 8, 4096, 4096) + up + down
    (attn,) = gen[(gen.batch_size == 8) & (gen.step == 1023)].latency
    head = g(gemm, 8, 65536, 4096) * 128256 / 65536  # wider than profiled: proportional
    assert frame.ms.iloc[0] == pytest.approx(32 * (linear + attn) + head)
    assert prov["extrapolated_reads"] >= 1


def test_aiconfigurator_needs_matching_heads():
    with pytest.raises(InputError, match="no generation-attention rows for heads=4"):
        import_profile("aiconfigurator", AIC, ModelShape.from_name("tiny"), 1, GRID)


def test_vidur_linear_ops_embedding_and_head_are_hand_computed():
    shape = ModelShape.from_name("llama-3-8b")
    grid = Grid(n_decode=(8,), chunk=(0, 16), ctx=(512,), prefix=(0,))
    frame, prov = import_profile("vidur", VIDUR, shape, 1, grid)
    mlp = pd.read_csv(VIDUR / "llama3_8b_mlp.csv")
    mlp = mlp[mlp.num_tensor_parallel_workers == 1]

    def op(name, tokens):
        return mlp[mlp.num_tokens == tokens][f"time_stats.{name}.median"].median()

    gemm = sum(
        op(o, 24) for o in ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
    )
    other = sum(
        op(o, 24)
        for o in ("input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")
    )
    r = row(frame, 8, 16, 512, 0)
    assert r.op_linear_ms == pytest.approx(32 * gemm)
    assert r.op_other_ms == pytest.approx(32 * other)
    assert r.op_embed_ms == pytest.approx(op("emb", 24))
    up9 = op("mlp_up_proj", 8) + (op("mlp_up_proj", 16) - op("mlp_up_proj", 8)) / 8  # 9 rows
    assert r.op_head_ms == pytest.approx(up9 * 128256 / (2 * 14336))
    parts = [c for c in frame.columns if c.startswith("op_")]
    assert r.ms == pytest.approx(sum(r[c] for c in parts))
    # Decode attention: the fitted Llama-2-7B model, per-work terms scaled by KV width 8/32.
    coef = np.array(prov["decode_attention_coef"])
    assert r.op_attn_decode_ms == pytest.approx(32 * (coef[0] + coef[1] * 8 * 512 + coef[2] * 8))


def test_vidur_attention_fit_reproduces_the_profile():
    samples = parse_attention_samples(VIDUR / "llama2_7b_attention_samples.txt")
    assert len(samples.decode) + len(samples.prefill) > 1000
    d, p = samples.decode, samples.prefill
    for feats, rows in ((decode_features, d), (prefill_features, p)):
        coef = fit_linear(feats(rows[:, 0], rows[:, 1]), rows[:, 2])
        pred = np.column_stack([np.ones(len(rows)), feats(rows[:, 0], rows[:, 1])]) @ coef
        big = rows[:, 2] > 0.2  # away from launch-overhead noise
        assert np.median(np.abs(pred[big] / rows[big, 2] - 1)) < 0.1


def test_vidur_tensor_parallel_adds_two_allreduces_per_layer():
    shape = ModelShape.from_name("llama-3-8b")
    grid = Grid(n_decode=(16,), chunk=(0,), ctx=(128,), prefix=(0,))
    frame, prov = import_profile("vidur", VIDUR, shape, 2, grid)
    net = pd.read_csv(VIDUR / "network" / "a100_dgx_all_reduce.csv")
    size = 16 * 4096 * 2
    xs = sorted(net["size"].unique())
    lo = max(x for x in xs if x <= size)
    hi = min(x for x in xs if x >= size)
    t_lo = net[net["size"] == lo]["time_stats.all_reduce.median"].median()
    t_hi = net[net["size"] == hi]["time_stats.all_reduce.median"].median()
    t = t_lo if lo == hi else t_lo + (t_hi - t_lo) * (size - lo) / (hi - lo)
    # 2 per layer (attention output, MLP down) + 1 (vocabulary-parallel embedding)
    assert frame.op_comm_ms.iloc[0] == pytest.approx((2 * 32 + 1) * t)
    assert prov["collective_table"] == "a100_dgx_all_reduce.csv"
    assert prov["collective_backend"].startswith("nccl")


def test_vidur_refuses_a_model_it_did_not_profile():
    with pytest.raises(InputError, match="no \\*mlp\\*.csv profiles mistral-7b"):
        import_profile("vidur", VIDUR, ModelShape.from_name("mistral-7b"), 1, GRID)


def test_import_command_writes_median_samples(tmp_path):
    shape = tmp_path / "shape.json"
    shape.write_text(json.dumps({k: v for k, v in ON_GRID.to_dict().items() if k != "name"}))
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps(GRID.to_dict()))
    out = tmp_path / "s.parquet"
    args = ["import", "aiconfigurator", str(AIC), "--model", str(shape), "--grid", str(grid)]
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    samples = read_samples(out)
    assert (samples.frame.rep == 0).all() and len(samples.frame) == len(
        set(map(tuple, samples.frame[["n_decode", "chunk", "ctx", "prefix"]].to_numpy()))
    )
    assert samples.provenance["model_hash"] == ModelShape.from_file(shape).hash
    assert (tmp_path / "s.fingerprint.json").exists()
    bad = CliRunner().invoke(app, ["import", "nope", str(AIC), "--model", "tiny"])
    assert bad.exit_code == 2 and "unknown profile kind" in bad.output
    assert math.isfinite(samples.frame.ms.max())


# --- tensor parallelism: the collective's times (slice: aiconfigurator_70b_tp4/, README) ---

AIC70 = DATA / "aiconfigurator_70b_tp4"
GRID70 = Grid(n_decode=(16, 32, 64), chunk=(0, 128), ctx=(511, 1023), prefix=(0,))
HIDDEN_70B = 8192


def allreduce_rows(backend: str) -> pd.DataFrame:
    comm = pd.read_csv(next(AIC70.glob("*custom_allreduce*")))
    return comm[(comm.num_gpus == 4) & (comm.backend == backend)].set_index("message_size")


def import_and_fit(tmp_path: Path, name: str, *extra: str) -> tuple[CostTable, dict]:
    grid = tmp_path / "grid70.json"
    grid.write_text(json.dumps(GRID70.to_dict()))
    samples = tmp_path / f"{name}.parquet"
    args = ["import", "aiconfigurator", str(AIC70), "--model", "llama-3-70b", "--tp", "4"]
    result = CliRunner().invoke(app, [*args, "--grid", str(grid), "--out", str(samples), *extra])
    assert result.exit_code == 0, result.output
    assert "all-reduces: " + ("none" if extra else "a100_sxm_comm") in result.output
    table = tmp_path / f"{name}.json"
    result = CliRunner().invoke(app, ["fit", str(samples), "--out", str(table)])
    assert result.exit_code == 0, result.output
    return CostTable.load(table), read_samples(samples).provenance


def test_tp4_70b_table_prices_a_64_decode_iteration_higher_by_its_allreduces(tmp_path):
    with_comm, prov = import_and_fit(tmp_path, "comm")
    without, prov_none = import_and_fit(tmp_path, "nocomm", "--no-comm")
    # By hand from the CSV: 64 decode tokens x 8192 = 524288 bf16 elements, a profiled
    # size; a decode-only iteration runs in vLLM's CUDA graph (backend vllm_graph);
    # 80 layers x 2 all-reduces + 1 for the vocabulary-parallel embedding.
    one = allreduce_rows("vllm_graph").loc[64 * HIDDEN_70B, "latency"]
    expected = (2 * 80 + 1) * one
    for ctx in (511, 1023):
        gap = with_comm.predict(64, 0, ctx, 0, q=0.5) - without.predict(64, 0, ctx, 0, q=0.5)
        assert gap == pytest.approx(expected, rel=1e-9)
    assert expected > 0.02 * without.predict(64, 0, 1023, 0, q=0.5)  # not negligible
    assert prov["collective_table"] == "a100_sxm_comm_vllm_0.14.0_custom_allreduce_perf_bf16.csv"
    assert prov["collective_backend"].startswith("vllm-v1")  # a graph engine's, the default
    assert prov_none["collective_table"] is None and "--no-comm" in prov_none["collective_backend"]
    assert with_comm.tp == 4 and without.tp == 4
    assert with_comm.fingerprint["collective_table"] == prov["collective_table"]


def test_an_iteration_that_prefills_reads_the_eager_allreduce_between_sizes():
    frame, _ = import_profile(  # an eager engine: its comm backend is auto
        "aiconfigurator", AIC70, ModelShape.from_name("llama-3-70b"), 4, GRID70, engine="eager"
    )
    eager = allreduce_rows("vllm_eager").latency
    size = (64 + 128) * HIDDEN_70B  # 1572864 elements: between 2^20 and 2^21
    lo, hi = 2**20, 2**21
    one = eager[lo] + (eager[hi] - eager[lo]) * (size - lo) / (hi - lo)
    assert row(frame, 64, 128, 1023, 0).op_comm_ms == pytest.approx(161 * one)


def test_comm_backend_flag_prices_decodes_eagerly_when_asked():
    shape = ModelShape.from_name("llama-3-70b")
    frame, prov = import_profile(
        "aiconfigurator", AIC70, shape, 4, GRID70, CommOptions(backend="eager")
    )
    one = allreduce_rows("vllm_eager").loc[16 * HIDDEN_70B, "latency"]
    assert row(frame, 16, 0, 511, 0).op_comm_ms == pytest.approx(161 * one)
    assert "vllm_eager for every iteration" in prov["collective_backend"]


def test_a_missing_collective_table_is_an_error_unless_no_comm():
    shape = ModelShape.from_name("llama-3-8b")
    grid = Grid(n_decode=(8,), chunk=(0,), ctx=(1023,), prefix=(0,))
    with pytest.raises(
        InputError, match="no \\*custom_allreduce\\*.csv collective table.*--no-comm"
    ):
        import_profile("aiconfigurator", AIC, shape, 2, grid)
    result = CliRunner().invoke(
        app, ["import", "aiconfigurator", str(AIC), "--model", "llama-3-8b", "--tp", "2"]
    )
    assert result.exit_code == 2 and "--no-comm" in result.output
    with pytest.raises(InputError, match="no all-reduce rows for num_gpus=16"):
        import_profile("aiconfigurator", AIC70, ModelShape.from_name("llama-3-70b"), 16, GRID70)
    with pytest.raises(InputError, match="one backend"):
        import_profile("vidur", VIDUR, shape, 2, grid, CommOptions(backend="graph"))
    with pytest.raises(InputError, match="--comm-backend"):
        CommOptions(backend="fast")


def test_vllm_v1_backend_reads_the_graph_all_reduce_for_captured_mixed_batches():
    shape = ModelShape.from_name("llama-3-70b")
    grid = Grid(n_decode=(64,), chunk=(0, 128, 512), ctx=(1023,), prefix=(0,))
    v1, prov = import_profile("aiconfigurator", AIC70, shape, 4, grid, CommOptions("vllm-v1"))
    auto, _ = import_profile("aiconfigurator", AIC70, shape, 4, grid, CommOptions("auto"))
    graph = allreduce_rows("vllm_graph").latency
    eager = allreduce_rows("vllm_eager").latency
    size = (64 + 128) * HIDDEN_70B  # 192 tokens <= 512: captured, graph all-reduce
    lo, hi = 2**20, 2**21
    one = graph[lo] + (graph[hi] - graph[lo]) * (size - lo) / (hi - lo)
    assert row(v1, 64, 128, 1023, 0).op_comm_ms == pytest.approx(161 * one)
    assert row(v1, 64, 128, 1023, 0).op_comm_ms < row(auto, 64, 128, 1023, 0).op_comm_ms
    # 64 + 512 = 576 tokens: beyond the largest captured size, eager as under auto
    assert row(v1, 64, 512, 1023, 0).op_comm_ms == row(auto, 64, 512, 1023, 0).op_comm_ms
    assert row(v1, 64, 512, 1023, 0).op_comm_ms > 161 * eager[2**20] * 0.99
    assert prov["collective_backend"].startswith(
        "vllm-v1: vllm_graph for every iteration of <= 512"
    )
    small, _ = import_profile(
        "aiconfigurator", AIC70, shape, 4, grid, CommOptions("vllm-v1", graph_max_tokens=128)
    )
    assert row(small, 64, 128, 1023, 0).op_comm_ms == row(auto, 64, 128, 1023, 0).op_comm_ms
    with pytest.raises(InputError, match="--graph-max-tokens"):
        CommOptions("vllm-v1", graph_max_tokens=0)
