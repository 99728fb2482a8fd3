"""``servecal export --format aic-fpm``: aiconfigurator's whole-forward-pass pair, read
by its loader's rules (``consumer_aic_fpm.py``, which names the commit it follows)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from consumer_aic_fpm import Refused, load_pair
from tablefactory import small_table
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels.export import export_table
from servecal.costmodels.export_aic_fpm import PREFILL_BATCHES
from servecal.costmodels.table import CostTable

H100 = Path(__file__).parents[2] / "sched" / "data" / "imported_h100x1" / "table.json"
runner = CliRunner()


def export(table: CostTable, folder: Path, **options: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    export_table(table, folder / "fpm_forward_perf.parquet", "aic-fpm", **options)
    return folder


def test_the_loader_takes_the_h100_table_and_reads_its_p50(tmp_path: Path) -> None:
    table = CostTable.load(H100)
    folder = export(table, tmp_path / "h100_sxm" / "vllm" / "0.14.0",
                    aic_model_path="meta-llama/Meta-Llama-3-8B")  # fmt: skip
    cells = load_pair(folder, "h100_sxm", "vllm", "0.14.0")
    (key,) = cells  # one cell: the model at aiconfigurator's default identity
    assert key[0] == "meta-llama/Meta-Llama-3-8B"
    assert key[1:] == ("bfloat16", "", "", "half", "bfloat16", "1", "1", "1", "1", "1", "1",
                       "auto", "auto", "False", "False")  # fmt: skip
    decode, prefill = cells[key]["decode"], cells[key]["prefill"]
    for n in (1, 8, 256):
        for ctx in (128, 2048, 8192):
            want = float(table.lookup(0.5, n, 0, ctx, 0)[0])
            assert decode[(n, n * ctx)] == pytest.approx(want, rel=1e-12)
    for b in PREFILL_BATCHES:  # one chunk of T tokens over b prompts with p cached each
        for t, p in ((1024, 0), (4096, 1024), (16384, 4096)):
            want = float(table.lookup(0.5, 0, t, 0, p)[0])
            assert prefill[(b, t, b * p)] == pytest.approx(want, rel=1e-12)
    assert len(decode) == 9 * 6 and len(prefill) == len(PREFILL_BATCHES) * 10 * 3


def test_the_identity_comes_from_the_fingerprint_or_the_flags(tmp_path: Path) -> None:
    table = small_table(fingerprint={"device_name": "NVIDIA H200", "dtype": "float16",
                                     "model": "qwen3-32b", "engine_version": "0.12.0"})  # fmt: skip
    cells = load_pair(export(table, tmp_path / "a"), "h200_sxm", "vllm", "0.12.0")
    (key,) = cells
    assert key[0] == "qwen3-32b" and key[1] == "float16"
    folder = export(table, tmp_path / "b", aic_system="b200_sxm", aic_version="0.13.0")
    assert load_pair(folder, "b200_sxm", "vllm", "0.13.0")
    with pytest.raises(Refused, match="system"):  # a pair in the wrong tree is refused
        load_pair(folder, "h200_sxm", "vllm", "0.13.0")


def test_a_sidecar_that_does_not_match_its_parquet_is_refused(tmp_path: Path) -> None:
    folder = export(small_table(fingerprint={"device_name": "H200", "engine_version": "1"}),
                    tmp_path)  # fmt: skip
    side = folder / "fpm_forward_perf.metadata.json"
    doc = json.loads(side.read_text())
    assert doc["schema_name"] == "aic_fpm_forward_perf" and doc["schema_version"] == 6
    doc["row_count"] += 1
    side.write_text(json.dumps(doc))
    with pytest.raises(Refused, match="row_count"):
        load_pair(folder, "h200_sxm", "vllm", "1")


@pytest.mark.parametrize(
    ("axes", "args", "match"),
    [
        ({"n_decode": [0, 4], "ctx": [0, 512], "prefix": [0], "chunk": [0]}, [], "no chunk >= 1"),
        ({"n_decode": [0], "ctx": [0, 512], "prefix": [0], "chunk": [0, 64]}, [],
         "no n_decode >= 1"),
        ({"n_decode": [0, 4], "ctx": [0, 512], "prefix": [0], "chunk": [0, 64]},
         ["--aic-version", "0.12.0"], "--aic-system"),
        ({"n_decode": [0, 4], "ctx": [0, 512], "prefix": [0], "chunk": [0, 64]},
         ["--aic-system", "h100_sxm"], "--aic-version"),
    ],
)  # fmt: skip
def test_what_cannot_be_written_is_one_line(
    axes: dict, args: list[str], match: str, tmp_path: Path
) -> None:
    shape = [len(axes[a]) for a in ("n_decode", "ctx", "prefix", "chunk")]
    CostTable(axes, {0.5: np.full(shape, 5.0)}).save(tmp_path / "t.json")
    out = tmp_path / "fpm_forward_perf.parquet"
    result = runner.invoke(app, ["export", str(tmp_path / "t.json"), "--format", "aic-fpm",
                                 "--out", str(out), *args])  # fmt: skip
    assert result.exit_code == 2, result.output
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and match in lines[0], lines
    assert not out.exists() and not (tmp_path / "fpm_forward_perf.metadata.json").exists()
