"""servecal fit / eval / export end to end, and one-line exit-2 errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels import CostTable
from servecal.costmodels.fit import MODELS
from servecal.costmodels.samples import write_samples
from servecal.costmodels.synthetic import SyntheticTruth, grid_points

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "samples_analytic.parquet"


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fit") / "table.json"
    result = runner.invoke(app, ["fit", str(EXAMPLE), "--out", str(out), "--seed", "1"])
    assert result.exit_code == 0, result.output
    assert "P99+δ coverage" in result.output
    # every candidate on its own line (the kept one starred), and the final choice
    lines = result.output.splitlines()
    for name in MODELS:
        assert any(line[4:].startswith(name + " ") for line in lines), result.output
    kept = CostTable.load(out).model["kind"]
    assert f"  * {kept} " in result.output and f"model: {kept} (" in result.output
    return out


def test_fit_json_reports_every_candidate(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    args = ["fit", str(EXAMPLE), "--out", str(out), "--seed", "1", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert set(doc) == {"out", "model", "metrics", "notes"} and doc["out"] == str(out)
    assert doc["model"] == CostTable.load(out).model
    candidates = doc["model"]["selection"]["candidates"]
    assert [c["name"] for c in candidates] == list(MODELS)
    kept = next(c for c in candidates if c["name"] == doc["model"]["kind"])
    assert doc["metrics"]["p50_mape"] == kept["p50_mape"]
    assert min(c["score"] for c in candidates) >= kept["score"] / 1.05


def test_fit_writes_a_loadable_table(fitted: Path) -> None:
    table = CostTable.load(fitted)
    assert table.quantiles == (0.5, 0.99) and table.margin_info is not None
    assert table.fingerprint["device_name"] == "synthetic"
    assert table.margin_info.validated_coverage is not None


def test_eval_json_has_exactly_the_keys(fitted: Path) -> None:
    result = runner.invoke(app, ["eval", str(fitted), str(EXAMPLE), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert list(doc) == [
        "p50_mape",
        "p99_coverage",
        "pinball",
        "tightness",
        "out_of_domain",
        "checked",
        "rows",
    ]
    assert set(doc["pinball"]) == {"0.5", "0.99"}
    assert doc["rows"] == len(pd.read_parquet(EXAMPLE)) and doc["p50_mape"] < 0.03


def test_eval_says_what_it_checked_and_refuses_checking_nothing(fitted, tmp_path) -> None:
    result = runner.invoke(app, ["eval", str(fitted), str(EXAMPLE)])
    assert result.exit_code == 0, result.output
    rows = len(pd.read_parquet(EXAMPLE))
    assert f"rows checked (in the grid):  {rows} of {rows}" in result.output
    frame = pd.read_parquet(EXAMPLE)
    write_samples(frame.assign(ctx=4096), tmp_path / "beyond.parquet", {"device_name": "synthetic"})
    _fails_with_one_line(["eval", str(fitted), str(tmp_path / "beyond.parquet")], "nothing checked")


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_export_long_form(fitted: Path, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"t.{fmt}"
    result = runner.invoke(app, ["export", str(fitted), "--format", fmt, "--out", str(out)])
    assert result.exit_code == 0, result.output
    frame = pd.read_parquet(out) if fmt == "parquet" else pd.read_csv(out)
    assert {"p50", "p99", "margin", "bound"} <= set(frame.columns)


def _fails_with_one_line(args: list[str], *words: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for word in words:
        assert word in lines[0]


def test_bad_samples_exit_2(tmp_path: Path) -> None:
    frame = SyntheticTruth().draw(grid_points([1, 4], [0, 16]), 2, np.random.default_rng(0))
    frame.loc[3, "ms"] = -1.0
    frame.to_csv(tmp_path / "bad.csv", index=False)
    out = tmp_path / "t.json"
    _fails_with_one_line(["fit", str(tmp_path / "bad.csv"), "--out", str(out)], "'ms'", "row 3")
    assert not out.exists()
    (tmp_path / "empty.parquet").write_bytes(b"")
    _fails_with_one_line(["fit", str(tmp_path / "empty.parquet"), "--out", str(out)], "empty")


def test_bad_flags_exit_2(tmp_path: Path) -> None:
    out = str(tmp_path / "t.json")
    _fails_with_one_line(["fit", str(EXAMPLE), "--out", out, "--family", "svm"], "--family")
    _fails_with_one_line(["fit", str(EXAMPLE), "--out", out, "--quantiles", "a,b"], "--quantiles")
    _fails_with_one_line(["fit", str(EXAMPLE), "--out", out, "--fold-share", "0"], "--fold-share")
    assert not Path(out).exists()


def test_bad_tables_exit_2(fitted: Path, tmp_path: Path) -> None:
    text = fitted.read_text()
    (tmp_path / "cut.json").write_text(text[:100])
    doc = json.loads(text)
    doc["schema"] = "servecal.costtable/2"
    (tmp_path / "wrong.json").write_text(json.dumps(doc))
    for name, words in [("cut.json", "invalid JSON"), ("wrong.json", "wrong schema")]:
        path = str(tmp_path / name)
        _fails_with_one_line(["eval", path, str(EXAMPLE)], name, words)
        _fails_with_one_line(["export", path, "--out", str(tmp_path / "x.csv")], name, words)
    _fails_with_one_line(["export", str(fitted), "--format", "xls", "--out", "x"], "--format")


def test_strict_eval_refuses_another_device(fitted: Path, tmp_path: Path) -> None:
    frame = pd.read_parquet(EXAMPLE)
    write_samples(frame, tmp_path / "other.parquet", {"device_name": "A100"})
    _fails_with_one_line(
        ["eval", str(fitted), str(tmp_path / "other.parquet")], "fingerprint mismatch"
    )
    args = ["eval", str(fitted), str(tmp_path / "other.parquet"), "--allow-mismatch"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0  # allowed: warns, one line
    warned = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and "fingerprint mismatch" in warned[0]
    assert "device_name 'synthetic' vs 'A100'" in warned[0]
    _fails_with_one_line([*args, "--strict"], "fingerprint mismatch")


def test_eval_reports_the_rows_beyond_the_grid(fitted, tmp_path) -> None:
    """No silent clamp: rows beyond the table's grid are counted and said, not checked."""
    frame = pd.read_parquet(EXAMPLE)
    beyond = frame.index % 4 == 0
    frame.loc[beyond, "ctx"] = 4096
    write_samples(frame, tmp_path / "some.parquet", {"device_name": "synthetic"})
    result = runner.invoke(app, ["eval", str(fitted), str(tmp_path / "some.parquet")])
    assert result.exit_code == 0, result.output
    count = int(beyond.sum())
    assert f"rows beyond the table's grid: {count} (priced at the edge)" in result.output
    assert f"rows checked (in the grid):  {len(frame) - count} of {len(frame)}" in result.output
