"""`servecal calibrate` end to end on the CPU (a small version of the 90 s run) and its errors."""

import json

import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels.samples import read_samples
from servecal.costmodels.table import CostTable

runner = CliRunner()
# 49 points of cheap iterations (~3-10 ms on one core): the whole design, 20 repeats each.
SMALL = {"n_decode": [0, 1, 2, 4], "chunk": [0, 8, 32], "ctx": [16, 64, 128], "prefix": [0, 32]}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cal") / "tiny"
    grid = out.parent / "grid.json"
    grid.write_text(json.dumps(SMALL))
    args = ["calibrate", "--device", "cpu", "--model", "tiny", "--grid", str(grid)]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_calibrate_writes_samples_fingerprint_and_table(run):
    out, output = run
    samples = read_samples(out / "samples.parquet")
    per_point = samples.frame.groupby(["n_decode", "chunk", "ctx", "prefix"]).size()
    assert len(per_point) == 49 and (per_point == 20).all()
    assert samples.frame.energy_j.isna().all()  # no RAPL here: null, not zero
    fp = json.loads((out / "samples.fingerprint.json").read_text())
    for key in (
        "device_name",
        "torch",
        "model_hash",
        "dtype",
        "attention_backend",
        "layers_timed",
        "layer_scale",
        "servecal_version",
        "date",
        "torch_threads",
    ):
        assert key in fp, key
    assert fp["dtype"] == "float32" and fp["layers_timed"] == 4 and fp["layer_scale"] == 1.0
    assert output.count("energy unavailable") == 1
    table = CostTable.load(out / "costtable.json")
    assert table.predict(2, 16, 64, 0) > 0
    doc = json.loads((out / "costtable.json").read_text())
    assert doc["content_hash"] == table.content_hash()  # the calibration's table is hashed
    assert "held-out P50 MAPE" in output and "P99 coverage" in output


def test_held_out_accuracy_is_recorded_and_the_gate_decides(run):
    """What the code decides on a timed calibration, not how loaded the CPU was: the
    held-out figures are recorded as rates, and the gate on the calibration's own samples
    checks every row on the table's grid and reaches a verdict whose exit code is its
    own. The accuracy itself is asserted on data the test controls
    (tests/costmodels/test_fit.py: P50 MAPE < 0.1 on synthetic samples) and the gate's
    ``valid`` on an unchanged calibration in tests/cli/test_validate_partial_drift.py."""
    out, _ = run
    validation = json.loads((out / "costtable.json").read_text())["validation"]
    assert 0.0 <= validation["p99_coverage"] <= 1.0
    assert 0.0 <= validation["p50_mape"] < float("inf")
    gate = runner.invoke(
        app, ["validate", str(out / "costtable.json"), str(out / "samples.parquet"), "--json"]
    )
    doc = json.loads(gate.stdout)
    assert gate.exit_code == {"valid": 0, "drifted": 1, "undecided": 2}[doc["verdict"]]
    assert doc["checked"] == doc["rows"] == 49 * 20  # every calibrated row is on the grid
    assert doc["points"] == 49


def test_budget_stops_between_blocks_of_points(tmp_path):
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps(SMALL))
    out = tmp_path / "short"
    args = ["calibrate", "--device", "cpu", "--budget", "0.01", "--grid", str(grid), "--no-fit"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    # The first block (32 points on CPU) always runs; no other starts after the budget.
    assert "measured 32/49 points" in result.output and "stopped: budget" in result.output
    assert len(read_samples(out / "samples.parquet").frame) == 32 * 20


def test_existing_output_needs_resume(run):
    out, _ = run
    result = runner.invoke(app, ["calibrate", "--device", "cpu", "--out", str(out)])
    assert result.exit_code == 2 and "already holds a calibration" in result.output


def test_resume_with_a_different_model_is_refused(run):
    out, _ = run
    result = runner.invoke(
        app, ["calibrate", "--out", str(out), "--resume", "--model", "mistral-7b"]
    )
    assert result.exit_code == 2 and "different model" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "gpt-5"], "unknown model shape"),
        (["--device", "tpu"], "--device"),
        (["--budget", "0"], "--budget"),
        (["--resume"], "no run to resume"),
        (["--device", "cuda:0"], "no CUDA device"),
    ],
)
def test_bad_options_are_one_line_errors(tmp_path, args, message):
    result = runner.invoke(app, ["calibrate", "--out", str(tmp_path / "x"), *args])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
