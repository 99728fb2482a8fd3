"""The shipped imported plan devices are what their shipped aiconfigurator slices give."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels.table import CostTable

DATA = Path(__file__).resolve().parents[3] / "sched" / "data"
runner = CliRunner()


@pytest.mark.parametrize("gpu", ["a100", "h100"])
def test_the_shipped_table_is_the_fit_of_the_shipped_slice(tmp_path, gpu):
    out = tmp_path / "samples.parquet"
    profile = str(DATA / f"aiconfigurator_{gpu}_sxm_vllm0.14")
    args = ["import", "aiconfigurator", profile, "--model", "llama-3-8b", "--out", str(out)]
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    samples = pd.read_parquet(out)
    table = CostTable.load(DATA / f"imported_{gpu}x1" / "table.json")
    cols = [samples[c].to_numpy() for c in ("n_decode", "chunk", "ctx", "prefix")]
    predicted = np.array([float(table.predict(*row, q=0.5)) for row in zip(*cols, strict=True)])
    error = np.abs(predicted / samples["ms"].to_numpy() - 1)
    # the fit keeps most points exactly; it makes the table monotone, moving a few (12% on
    # the H100: a varlen mixed step adds little attention to a decode step, so the GEMM
    # table's wobble at 1-17 rows, 5.40 -> 5.37 ms, shows through along the chunk)
    assert np.median(error) < 1e-6 and (error < 1e-6).mean() > 0.85 and error.max() < 0.05
    truth = pd.read_csv(DATA / f"imported_{gpu}x1" / "samples.csv")
    assert len(truth) > 3 * len(samples)  # the denser truth grid


@pytest.mark.parametrize("dtype", ["bfloat16", "fp8"])
def test_the_shipped_vllm024_dtype_devices_are_the_fit_of_their_dtypes_rows(tmp_path, dtype):
    """``imported_h100x1_vllm0.24_{bf16,fp8}``: the import of the vLLM 0.24 slice with
    ``--dtype`` and ``--kv-dtype`` (the dtype candidates of examples/capacity/azure_fp8.toml)."""
    name = f"imported_h100x1_vllm0.24_{'bf16' if dtype == 'bfloat16' else dtype}"
    out = tmp_path / "samples.parquet"
    profile = str(DATA / "aiconfigurator_h100_sxm_vllm0.24_llama-3-8b")
    args = ["import", "aiconfigurator", profile, "--model", "llama-3-8b", "--out", str(out),
            "--dtype", dtype, "--kv-dtype", dtype]  # fmt: skip
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    samples = pd.read_parquet(out)
    table = CostTable.load(DATA / name / "table.json")
    assert (table.fingerprint["dtype"], table.fingerprint["kv_dtype"]) == (dtype, dtype)
    cols = [samples[c].to_numpy() for c in ("n_decode", "chunk", "ctx", "prefix")]
    predicted = np.array([float(table.predict(*row, q=0.5)) for row in zip(*cols, strict=True)])
    error = np.abs(predicted / samples["ms"].to_numpy() - 1)
    assert np.median(error) < 1e-6 and error.max() < 0.05


def test_the_shipped_fp8_h100_decodes_are_shorter_than_its_bf16_ones_everywhere():
    bf16 = pd.read_csv(DATA / "imported_h100x1_vllm0.24_bf16" / "samples.csv")
    fp8 = pd.read_csv(DATA / "imported_h100x1_vllm0.24_fp8" / "samples.csv")
    keys = ["n_decode", "chunk", "ctx", "prefix"]
    assert (bf16[keys] == fp8[keys]).all().all()
    ratio = fp8["ms"] / bf16["ms"]
    decode = bf16["chunk"] == 0
    assert ratio[decode].min() > 0.4 and ratio[decode].max() < 1.0
    # most steps are shorter; the profile prices some mixed steps with 288-1,280-token
    # chunks slower in fp8 (its fp8 GEMM and fp8-KV prefix-attention rows), up to 1.21x
    assert ratio.median() < 0.9 and (ratio < 1).mean() > 0.85 and ratio.max() < 1.25


def test_the_imported_h100_is_faster_than_the_imported_a100_everywhere():
    a = pd.read_csv(DATA / "imported_a100x1" / "samples.csv")
    h = pd.read_csv(DATA / "imported_h100x1" / "samples.csv")
    assert (
        (a[["n_decode", "chunk", "ctx", "prefix"]] == h[["n_decode", "chunk", "ctx", "prefix"]])
        .all()
        .all()
    )
    ratio = h["ms"] / a["ms"]
    assert ratio.min() > 0.2 and ratio.max() < 1.0
