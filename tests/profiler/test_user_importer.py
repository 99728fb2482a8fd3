"""An importer written outside the project runs by import path (docs/plugins.md).

The importer is the example printed in docs/plugins.md, written to a folder put on
PYTHONPATH and run through the real ``servecal import`` entry point.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from userplugins import docs_example, servecal

from servecal.costmodels.samples import read_samples
from servecal.profiler.shapes import ModelShape

RATES = {
    "device": "rates-gpu",
    "gemm_fixed_ms": 0.01,
    "gemm_ms_per_token": 0.002,
    "attention_ms_per_kv_token": 1e-6,
    "head_ms_per_row": 0.003,
}
GRID = {"n_decode": [0, 8], "chunk": [0, 256], "ctx": [512, 2048], "prefix": [0, 1024]}


@pytest.fixture(scope="module")
def user_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    code = docs_example("An importer")
    assert "class RatesSource" in code and "def linear_ms" in code
    folder = tmp_path_factory.mktemp("user")
    (folder / "rates_source.py").write_text(code, encoding="utf-8")
    (folder / "rates.json").write_text(json.dumps(RATES))
    (folder / "grid.json").write_text(json.dumps(GRID))
    return folder


def test_an_importer_loads_by_import_path(user_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "samples.parquet"
    res = servecal(user_path, "import", "rates_source:RatesSource", str(user_path / "rates.json"),
                   "--model", "llama-3-8b", "--grid", str(user_path / "grid.json"),
                   "--out", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr
    data = read_samples(out)
    assert data.provenance["source"] == "servecal import rates_source:RatesSource"
    assert data.provenance["device_name"] == "rates-gpu"
    layers = ModelShape.from_name("llama-3-8b").n_layers
    frame = data.frame
    row = frame[(frame.n_decode == 8) & (frame.chunk == 0) & (frame.ctx == 2048)].iloc[0]
    r = RATES
    expected = layers * (r["gemm_fixed_ms"] + r["gemm_ms_per_token"] * 8)
    expected += layers * r["attention_ms_per_kv_token"] * 8 * 2048 + r["head_ms_per_row"] * 8
    assert row.ms == pytest.approx(expected, rel=1e-9)


def test_an_importer_that_fails_is_one_line(user_path: Path, tmp_path: Path) -> None:
    (tmp_path / "rates.json").write_text("{}")  # no rates: the user's methods raise KeyError
    res = servecal(user_path, "import", "rates_source:RatesSource", str(tmp_path / "rates.json"),
                   "--model", "llama-3-8b", "--out", str(tmp_path / "s.parquet"))  # fmt: skip
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "error: servecal import rates_source:RatesSource: KeyError: 'gemm_fixed_ms'"
    ]
    assert not (tmp_path / "s.parquet").exists()
