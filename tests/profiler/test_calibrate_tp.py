"""``calibrate --tp 2`` on the CPU: gloo ranks in their own processes, rank 0 timed."""

import json
import multiprocessing

import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels.samples import read_samples
from servecal.costmodels.table import CostTable
from servecal.profiler.calibrate import CalibrateConfig, calibrate
from servecal.profiler.shapes import ModelShape
from servecal.profiler.shards import ShardStore

runner = CliRunner()
GRID = {"n_decode": [0, 1, 4], "chunk": [0, 8, 32], "ctx": [16, 64], "prefix": [0]}  # 14 points
REPEATS = 8


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    root = tmp_path_factory.mktemp("tp2")
    grid = root / "grid.json"
    grid.write_text(json.dumps(GRID))
    # The entry point a scheduler (fleet) calls: a plain function of a frozen config.
    cfg = CalibrateConfig(
        out=root / "run", device="cpu", model="tiny", grid=str(grid), repeats=REPEATS,
        threads=1, tp=2,
    )  # fmt: skip
    lines: list[str] = []
    result = calibrate(cfg, on_message=lines.append)
    return result, "\n".join(lines)


def test_tp2_calibration_writes_samples_fingerprint_and_a_tp2_table(tp2):
    result, log = tp2
    assert result.outcome.stopped_by == "complete"
    samples = read_samples(result.samples_path)
    per_point = samples.frame.groupby(["n_decode", "chunk", "ctx", "prefix"]).size()
    assert len(per_point) == 14 and (per_point == REPEATS).all()
    assert (samples.frame.ms > 0).all()
    fp = json.loads((result.out / "samples.fingerprint.json").read_text())
    assert fp["tp"] == 2 and fp["collective_backend"] == "gloo"
    assert fp["model_hash"] == ModelShape.from_name("tiny").hash  # the whole model's identity
    assert ShardStore(result.out).read_plan()["tp"] == 2
    assert CostTable.load(result.table_path).tp == 2
    assert "tensor parallel: 2 ranks over gloo" in log
    assert not multiprocessing.active_children()  # the other rank has exited


def test_resume_with_another_tp_is_refused(tp2):
    result, _ = tp2
    args = ["calibrate", "--out", str(result.out), "--resume", "--tp", "1"]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2 and "different tp" in refused.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tp", "3"], "--tp 3 does not divide tiny's query heads 4"),
        (["--tp", "0"], "--tp must be an integer >= 1"),
        (["--tp", "2", "--kv-layout", "paged"], "contiguous layout"),
    ],
)
def test_bad_tp_options_are_one_line_errors(tmp_path, args, message):
    base = ["calibrate", "--device", "cpu", "--model", "tiny", "--out", str(tmp_path / "x")]
    result = runner.invoke(app, [*base, *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
