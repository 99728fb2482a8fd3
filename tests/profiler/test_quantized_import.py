"""fp8 weights and an fp8 KV cache in `servecal import aiconfigurator` (issue 46, part 1).

The H100 vLLM 0.24 slice (`sched/data/aiconfigurator_h100_sxm_vllm0.24_llama-3-8b/`, from
aiconfigurator-core 0.12.0) holds bf16 and fp8 GEMM rows and bf16 and fp8 KV-cache attention
rows for Llama-3-8B.
"""

from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels.provenance import fingerprint_diff
from servecal.profiler.design import Grid
from servecal.profiler.importers import import_profile
from servecal.profiler.shapes import ModelShape

ROOT = Path(__file__).parents[2]
QUANT = ROOT / "sched" / "data" / "aiconfigurator_h100_sxm_vllm0.24_llama-3-8b"
BF16_ONLY = ROOT / "sched" / "data" / "aiconfigurator_h100_sxm_vllm0.14"
GRID = Grid(n_decode=(0, 256), chunk=(0, 4096), ctx=(8192,), prefix=(0,))
SHAPE = ModelShape.from_name("llama-3-8b")


def steps(weight: str, kv: str) -> tuple[pd.DataFrame, dict]:
    frame, prov = import_profile(
        "aiconfigurator", QUANT, SHAPE, 1, GRID, pointwise_device="h100-sxm",
        weight_dtype=weight, kv_dtype=kv,
    )  # fmt: skip
    return frame.set_index(["n_decode", "chunk"]), prov


def test_fp8_rows_price_the_gemms_and_the_kv_reads_and_both_dtypes_are_recorded():
    bf16, p0 = steps("bfloat16", "bfloat16")
    fp8w, p1 = steps("fp8", "bfloat16")
    fp8kv, p2 = steps("bfloat16", "fp8")
    assert (p0["dtype"], p0["kv_dtype"]) == ("bfloat16", "bfloat16")
    assert (p1["dtype"], p2["kv_dtype"]) == ("fp8", "fp8")
    prefill, decode = (0, 4096), (256, 0)
    # fp8 GEMMs: a long prefill's linear layers are faster, its attention the same
    assert fp8w.loc[prefill, "op_linear_ms"] < 0.9 * bf16.loc[prefill, "op_linear_ms"]
    assert fp8w.loc[prefill, "op_attn_prefill_ms"] == bf16.loc[prefill, "op_attn_prefill_ms"]
    # an fp8 KV cache: 256 decodes at 8,192 tokens read half the KV bytes, GEMMs the same
    assert fp8kv.loc[decode, "op_attn_decode_ms"] < 0.8 * bf16.loc[decode, "op_attn_decode_ms"]
    assert fp8kv.loc[decode, "op_linear_ms"] == bf16.loc[decode, "op_linear_ms"]


def test_a_dtype_the_profile_lacks_is_refused_in_one_line(tmp_path: Path):
    args = ["import", "aiconfigurator", str(BF16_ONLY), "--model", "llama-3-8b"]
    out = str(tmp_path / "s.parquet")
    result = CliRunner().invoke(app, [*args, "--dtype", "fp8", "--out", out])
    assert result.exit_code == 2
    assert "no fp8 gemm rows for the weight dtype (profiled: bfloat16)" in result.output
    assert not (tmp_path / "s.parquet").exists()


def test_a_kv_dtype_mismatch_between_table_and_deployment_is_a_fingerprint_mismatch():
    table = {"model": "llama-3-8b", "dtype": "bfloat16", "kv_dtype": "bfloat16", "tp": 1}
    assert fingerprint_diff(table, {**table, "kv_dtype": "fp8"}) == ["kv_dtype"]
    assert fingerprint_diff(table, {**table, "dtype": "fp8"}) == ["dtype"]
    assert fingerprint_diff(table, {k: v for k, v in table.items() if k != "kv_dtype"}) == []


def test_validate_refuses_fp8_kv_samples_against_a_bf16_table(tmp_path: Path):
    runner = CliRunner()
    base = ["import", "aiconfigurator", str(QUANT), "--model", "llama-3-8b", "--tp", "1"]
    grid = tmp_path / "grid.json"
    grid.write_text('{"n_decode": [0, 8, 64], "chunk": [0, 512], "ctx": [1024], "prefix": [0]}')
    for kv in ("bfloat16", "fp8"):
        (tmp_path / kv).mkdir()
        out = tmp_path / kv / "s.parquet"
        done = runner.invoke(app, [*base, "--grid", str(grid), "--kv-dtype", kv, "--out", str(out)])
        assert done.exit_code == 0, done.output
    table = tmp_path / "bfloat16" / "table.json"
    done = runner.invoke(
        app,
        ["fit", str(tmp_path / "bfloat16" / "s.parquet"), "--model", "table", "--out", str(table)],
    )
    assert done.exit_code == 0, done.output
    result = runner.invoke(app, ["validate", str(table), str(tmp_path / "fp8" / "s.parquet")])
    assert result.exit_code == 2 and "fingerprint mismatch" in result.output
    assert "kv_dtype" in result.output


B200 = ROOT / "sched" / "data" / "aiconfigurator_b200_sxm_vllm0.24_llama-3-8b"


def test_4bit_weights_compose_from_the_b200_nvfp4_gemm_rows_and_are_recorded():
    """aiconfigurator 0.12.0's dense 4-bit GEMMs for vLLM are NVFP4 on Blackwell (B200 here);
    its H100 vLLM GEMM rows are bf16, fp8 and fp8_block only."""

    def b200(weight: str) -> tuple[pd.DataFrame, dict]:
        frame, prov = import_profile(
            "aiconfigurator", B200, SHAPE, 1, GRID, weight_dtype=weight, kv_dtype="bfloat16"
        )
        return frame.set_index(["n_decode", "chunk"]), prov

    bf16, p0 = b200("bfloat16")
    fp4, p1 = b200("nvfp4")
    assert (p1["dtype"], p1["kv_dtype"], p1["device_name"]) == ("nvfp4", "bfloat16", "NVIDIA B200")
    assert p1["pointwise_device"] == "b200-sxm" and p1["pointwise_bandwidth_gbps"] == 8000.0
    prefill, decode = (0, 4096), (256, 0)
    # 4-bit GEMMs: a long prefill's linear layers at least 1.5x faster, its attention the same
    assert fp4.loc[prefill, "op_linear_ms"] < bf16.loc[prefill, "op_linear_ms"] / 1.5
    assert fp4.loc[prefill, "op_attn_prefill_ms"] == bf16.loc[prefill, "op_attn_prefill_ms"]
    assert fp4.loc[decode, "op_attn_decode_ms"] == bf16.loc[decode, "op_attn_decode_ms"]
    assert p0["dtype"] == "bfloat16"


def test_4bit_weights_on_the_h100_profile_are_refused_naming_what_it_has(tmp_path: Path):
    args = ["import", "aiconfigurator", str(QUANT), "--model", "llama-3-8b"]
    out = str(tmp_path / "s.parquet")
    result = CliRunner().invoke(app, [*args, "--dtype", "nvfp4", "--out", out])
    assert result.exit_code == 2
    assert "no nvfp4 gemm rows for the weight dtype (profiled: bfloat16, fp8)" in result.output
