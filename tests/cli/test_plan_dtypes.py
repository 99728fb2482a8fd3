"""Dtype as a plan axis (issue 46, part 3): candidates of one device that differ by weight and
KV-cache dtype, each with its own table; a stated dtype its table or truth was not measured
in is refused with exit 2; plan names the cheapest fleet of each dtype and overall."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.profiler.kvbudget import kv_tokens
from servecal.profiler.shapes import ModelShape
from servecal.sched.cluster.space import load_space
from servecal.util.errors import InputError

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "sched" / "data"
EXAMPLE = ROOT / "examples" / "capacity" / "azure_fp8.toml"
SHAPE = ModelShape.from_name("llama-3-8b")

HEAD = f"""
[workload]
trace = "{DATA / "azure_conv_head4000.csv"}"
requests = 200
rate = 60
tpot_slo_ms = 25

[search]
replicas = [1, 4]
policies = [{{name = "sloweave", quantile = 0.5, use_margin = false}}]
routers = ["round-robin"]

[[device]]
name = "H100"
price_per_gpu_hour = 3.5
"""


def candidate(table: str, truth: str | None = None, extra: str = "") -> str:
    """A ``[[device.tp]]`` entry on the imported vLLM 0.24 H100 device ``table`` (bf16 or
    fp8), its truth from ``truth`` (default: the same)."""
    own = DATA / f"imported_h100x1_vllm0.24_{table}"
    samples = DATA / f"imported_h100x1_vllm0.24_{truth or table}" / "samples.csv"
    return (f'[[device.tp]]\nsize = 1\ntruth = "samples:{samples}"\n'
            f'predictor = "{own / "table.json"}"\n{extra}')  # fmt: skip


def space(tmp_path: Path, body: str):
    path = tmp_path / "plan.toml"
    path.write_text(HEAD + body)
    return load_space(path)


def test_the_example_has_a_bf16_and_an_fp8_candidate_of_one_h100_with_their_kv_budgets():
    s = load_space(EXAMPLE)
    bf16, fp8 = s.hardware
    assert (bf16.name, bf16.dtype, bf16.kv_dtype) == ("H100x1-bf16", "bfloat16", "bfloat16")
    assert (fp8.name, fp8.dtype, fp8.kv_dtype) == ("H100x1-fp8", "fp8", "fp8")
    assert bf16.kv_capacity == kv_tokens(SHAPE, 50, "bfloat16") == 381_469
    assert fp8.kv_capacity == kv_tokens(SHAPE, 58, "fp8") == 885_009
    assert len(s.configs) == 8  # 2 dtypes x 2 policies x 2 routers


def test_a_stated_dtype_the_table_was_not_measured_in_is_refused(tmp_path):
    # a bf16 table (and truth) stated as an fp8 deployment
    with pytest.raises(InputError, match=r"H100x1-fp8: dtype = 'fp8' stated, but .*bf16/table"
                                         r"\.json was measured with dtype 'bfloat16'"):  # fmt: skip
        space(tmp_path, candidate("bf16", extra='dtype = "fp8"\n'))
    # an fp8-KV table stated as bf16 KV: the KV dtype is checked too
    with pytest.raises(InputError, match=r"kv_dtype = 'bfloat16' stated, but .*fp8/table\.json "
                                         r"was measured with kv_dtype 'fp8'"):  # fmt: skip
        space(tmp_path, candidate("fp8", extra='kv_dtype = "bfloat16"\n'))
    # the fleet devices' tables record no dtype: a stated one cannot be vouched for
    with pytest.raises(InputError, match="records no dtype"):
        space(tmp_path, '[[device.tp]]\nsize = 1\nfleet = "H100x1"\ndtype = "fp8"\n')
    # spellings the fingerprints do not use are read as theirs
    ok = space(tmp_path, candidate("fp8", extra='dtype = "fp8_e4m3"\nkv_dtype = "fp8"\n'))
    assert ok.hardware[0].name == "H100x1-fp8"
    ok = space(tmp_path, candidate("bf16", extra='dtype = "bf16"\n'))
    assert ok.hardware[0].dtype == "bfloat16"


def test_an_fp8_table_planning_a_bf16_truth_is_a_fingerprint_mismatch(tmp_path):
    # the pair check every plan entry has, on the dtypes: no dtype needs to be stated
    with pytest.raises(InputError, match=r"fingerprint mismatch .*\(dtype 'fp8' vs 'bfloat16', "
                                         r"kv_dtype 'fp8' vs 'bfloat16'\)"):  # fmt: skip
        space(tmp_path, candidate("fp8", truth="bf16"))


def test_without_a_stated_dtype_the_tables_is_used_for_the_row_and_the_kv_budget(tmp_path):
    s = space(tmp_path, candidate("fp8", extra='kv_memory_gb = 40\nmodel = "llama-3-8b"\n'))
    [h] = s.hardware
    assert (h.name, h.dtype, h.kv_dtype) == ("H100x1", "fp8", "fp8")  # unstated: no suffix
    assert h.kv_capacity == kv_tokens(SHAPE, 40, "fp8") == 610_351


def test_two_candidates_of_the_same_name_are_refused(tmp_path):
    with pytest.raises(InputError, match="two candidates are both 'H100x1'"):
        space(tmp_path, candidate("bf16") + candidate("fp8"))


def test_a_mismatch_through_the_cli_is_one_line_and_exit_2_or_a_warning(tmp_path):
    path = tmp_path / "plan.toml"
    path.write_text(HEAD + candidate("bf16", extra='dtype = "fp8"\nkv_dtype = "fp8"\n'))
    out = tmp_path / "out"
    result = runner.invoke(app, ["plan", str(path), "--out", str(out), "--jobs", "1"])
    assert result.exit_code == 2
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: H100x1-fp8: dtype = 'fp8' stated")
    assert not out.exists()
    allowed = runner.invoke(app, ["plan", str(path), "--out", str(out), "--jobs", "1",
                                  "--allow-mismatch", "--no-frontier"])  # fmt: skip
    assert allowed.exit_code == 0, allowed.output
    assert "warning: H100x1-fp8: dtype = 'fp8' stated" in allowed.output


def test_plan_names_the_cheapest_of_each_dtype_and_rows_carry_the_dtypes(tmp_path):
    both = 'dtype = "{0}"\nkv_dtype = "{0}"\nkv_memory_gb = 40\nmodel = "llama-3-8b"\n'
    path = tmp_path / "plan.toml"
    path.write_text(HEAD + candidate("bf16", extra=both.format("bfloat16"))
                    + candidate("fp8", extra=both.format("fp8")))  # fmt: skip
    args = ["plan", str(path), "--out", str(tmp_path / "out"), "--jobs", "1", "--no-frontier"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert {(r["hardware"], r["dtype"], r["kv_dtype"]) for r in doc["rows"]} == {
        ("H100x1-bf16", "bfloat16", "bfloat16"), ("H100x1-fp8", "fp8", "fp8")}  # fmt: skip
    best = doc["cheapest_by_dtype"]
    assert set(best) == {"bfloat16/bfloat16", "fp8/fp8"}
    assert best["fp8/fp8"]["hardware"] == "H100x1-fp8"
    assert best["bfloat16/bfloat16"]["hardware"] == "H100x1-bf16"
    # the overall answer is the cheaper of the two (ties: configuration order)
    cheapest = min(best.values(), key=lambda r: r["cost_per_hour"])
    assert doc["answer"]["cost_per_hour"] == cheapest["cost_per_hour"]
    # fp8 steps are never slower here and hold more KV: never more replicas than bf16
    assert best["fp8/fp8"]["replicas"] <= best["bfloat16/bfloat16"]["replicas"]
    text = runner.invoke(app, [*args[:3], str(tmp_path / "again"), *args[4:]])
    assert text.exit_code == 0, text.output
    assert "cheapest bfloat16 weights, bfloat16 KV: " in text.output
    assert "cheapest fp8 weights, fp8 KV: " in text.output


def test_a_split_fleet_of_fp8_pools_moves_half_the_kv_bytes(tmp_path):
    both = 'dtype = "{0}"\nkv_dtype = "{0}"\n'
    split = '[disaggregated]\nratios = [[1, 1]]\nlinks = ["roce-100g"]\nmodel = "llama-3-8b"\n'
    s = space(tmp_path, candidate("bf16", extra=both.format("bfloat16"))
              + candidate("fp8", extra=both.format("fp8")) + split)  # fmt: skip
    moved = {p.prefill.name: p.shape.bytes_per_token for p in s.disaggregated}
    # Llama-3-8B: 32 layers x K and V x 8 KV heads x 128 x 2 bytes (bf16), 1 byte (fp8)
    assert moved == {"H100x1-bf16": 131_072, "H100x1-fp8": 65_536}
    assert {p.dtype for p in s.disaggregated} == {"bfloat16", "fp8"}
