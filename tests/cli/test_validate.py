"""``servecal validate``: valid → exit 0, slowed 10% → exit 1, bad input → exit 2 (one line)."""

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels.samples import write_samples
from servecal.costmodels.synthetic import SyntheticTruth, grid_points

runner = CliRunner()
TRUTH = SyntheticTruth(sigma=0.05, spike_prob=0.003)
POINTS = grid_points([0, 1, 4, 16, 64], [0, 64, 256, 1024, 2048], [0, 512], [0])
PROV = {"device": "synthetic", "source": "test"}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from servecal.costmodels.fit import fit_cost_table

    root = tmp_path_factory.mktemp("validate")
    calib = TRUTH.draw(POINTS, 20, np.random.default_rng(1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = fit_cost_table(calib, PROV, seed=0).table
    table.save(root / "table.json")
    out = {"table": root / "table.json"}
    fresh = TRUTH.draw(POINTS, 20, np.random.default_rng(7))
    for name, factor in (("same", 1.0), ("slow", 1.10)):
        (root / name).mkdir()
        write_samples(fresh.assign(ms=fresh["ms"] * factor), root / name / "s.parquet", PROV)
        out[name] = root / name / "s.parquet"
    return out


def test_same_conditions_valid_exit_0(files) -> None:
    r = runner.invoke(app, ["validate", str(files["table"]), str(files["same"])])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("verdict: valid")
    assert "coverage" in r.output


def test_slowed_ten_percent_drifted_exit_1(files) -> None:
    r = runner.invoke(app, ["validate", str(files["table"]), str(files["slow"])])
    assert r.exit_code == 1, r.output
    assert r.output.startswith("verdict: drifted")
    assert "test slowdown:" in r.output and "REJECTED" in r.output
    assert "recalibrate" in r.output


def test_json_verdict(files) -> None:
    r = runner.invoke(app, ["validate", str(files["table"]), str(files["slow"]), "--json"])
    assert r.exit_code == 1
    doc = json.loads(r.output)
    assert doc["verdict"] == "drifted"
    assert 1.05 < doc["factor"] < 1.15
    assert doc["coverage_promised"] == pytest.approx(0.99)
    assert doc["false_alarm_bound"] == pytest.approx(0.01)


def _one_error_line(r) -> str:
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert "Traceback" not in r.output
    return lines[0]


def test_bad_inputs_exit_2_with_one_line(files, tmp_path: Path) -> None:
    table, same = str(files["table"]), str(files["same"])
    line = _one_error_line(runner.invoke(app, ["validate", str(tmp_path / "no.json"), same]))
    assert "no.json" in line
    line = _one_error_line(runner.invoke(app, ["validate", table, str(tmp_path / "none")]))
    assert "none" in line
    (tmp_path / "bad.json").write_text("{not json")
    line = _one_error_line(runner.invoke(app, ["validate", str(tmp_path / "bad.json"), same]))
    assert "bad.json" in line
    header = "n_decode,chunk,ctx,prefix,millis,energy_j,rep"
    (tmp_path / "cols.csv").write_text(header + "\n1,0,0,0,1.0,,0\n")
    line = _one_error_line(runner.invoke(app, ["validate", table, str(tmp_path / "cols.csv")]))
    assert "'ms'" in line
    line = _one_error_line(runner.invoke(app, ["validate", table, same, "--min-shift", "2"]))
    assert "--min-shift" in line
