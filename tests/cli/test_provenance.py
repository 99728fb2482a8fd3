"""Provenance: every table carries a content hash of its numbers, an edited one fails to
load (so does one whose hash was deleted), and a table of another device or model is
refused (``--allow-mismatch``: warns) wherever a table meets measurements or a truth:
validate, eval, simulate/compare --predictor, report."""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels import AnalyticPredictor, CostTable, InputError
from servecal.costmodels.provenance import EditedTableError
from servecal.costmodels.samples import write_samples
from servecal.costmodels.synthetic import SyntheticTruth, grid_points

runner = CliRunner()
PROV = {"device_name": "synthetic", "model": "analytic", "model_hash": "m1", "tp": 1}
AXES = ([1, 8, 32], [0, 64, 256, 1024])


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("prov")
    frame = SyntheticTruth().draw(grid_points(*AXES), 10, np.random.default_rng(0))
    write_samples(frame, root / "samples.parquet", PROV)
    r = runner.invoke(app, ["fit", str(root / "samples.parquet"), "--out", str(root / "t.json")])
    assert r.exit_code == 0, r.output
    return {"root": root, "samples": root / "samples.parquet", "table": root / "t.json"}


def _hash_ok(path: Path) -> bool:
    doc = json.loads(path.read_text())
    return doc["content_hash"] == CostTable.load(path).content_hash()


def test_fit_and_compile_write_a_content_hash(made, tmp_path: Path) -> None:
    assert _hash_ok(made["table"])
    from servecal.costmodels.fit import compile_predictor

    axes = {"n_decode": AXES[0], "chunk": AXES[1], "ctx": [0], "prefix": [0]}
    compiled = compile_predictor(AnalyticPredictor(sigma=0.05), axes, fingerprint=PROV)
    compiled.save(tmp_path / "compiled.json")
    assert _hash_ok(tmp_path / "compiled.json")
    rounded = CostTable.load(made["table"]).with_between("round_up")  # the demo's table
    rounded.save(tmp_path / "rounded.json")
    assert _hash_ok(tmp_path / "rounded.json")
    assert rounded.content_hash() != CostTable.load(made["table"]).content_hash()


def test_export_writes_the_hash_of_its_file_and_of_its_table(made, tmp_path: Path) -> None:
    for fmt in ("csv", "parquet"):
        out = tmp_path / f"t.{fmt}"
        r = runner.invoke(app, ["export", str(made["table"]), "--format", fmt, "--out", str(out)])
        assert r.exit_code == 0, r.output
        side = json.loads((tmp_path / f"t.{fmt}.provenance.json").read_text())
        assert side["file_sha256"] == "sha256:" + hashlib.sha256(out.read_bytes()).hexdigest()
        assert side["table_content_hash"] == CostTable.load(made["table"]).content_hash()
        assert side["fingerprint"]["model"] == "analytic"


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["quantiles"]["0.5"].__setitem__(0, d["quantiles"]["0.5"][0] * 0.5),
        lambda d: d["quantiles"]["0.99"].__setitem__(-1, d["quantiles"]["0.99"][-1] + 1.0),
        lambda d: d["margin"].update(rho=d["margin"]["rho"] / 2),
        # the last cell is the largest: raising it keeps the table monotone, so only
        # the hash can refuse it
        lambda d: d["energy_j"].__setitem__(-1, d["energy_j"][-1] * 1.1),
        lambda d: d["fingerprint"].update(model="llama-3-8b"),
        lambda d: d.update(between="round_up"),
    ],
    ids=["p50", "p99", "margin", "energy", "fingerprint", "rule"],
)
def test_a_table_with_any_number_edited_fails_to_load(made, tmp_path: Path, edit) -> None:
    doc = json.loads(made["table"].read_text())
    edit(doc)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(EditedTableError, match="content hash mismatch"):
        CostTable.load(path)
    CostTable.load(path, allow_edited=True)  # explicitly allowed
    # an edited fingerprint (another model) also mismatches the samples: allowed apart
    mismatch = ["--allow-mismatch"] if doc["fingerprint"]["model"] != PROV["model"] else []
    for args, more in ((["eval", str(path), str(made["samples"])], mismatch),
                       (["export", str(path), "--out", str(tmp_path / "x.csv")], [])):  # fmt: skip
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and r.output.startswith("error: ") and "--allow-edited" in r.output
        assert runner.invoke(app, [*args, "--allow-edited", *more]).exit_code == 0


def test_a_table_without_a_content_hash_is_refused_unless_allowed(made, tmp_path: Path) -> None:
    doc = json.loads(made["table"].read_text())
    del doc["content_hash"]  # deleted: an edit must not hide behind it
    doc["quantiles"]["0.5"][0] *= 0.5
    (tmp_path / "old.json").write_text(json.dumps(doc))
    with pytest.raises(EditedTableError, match="no content_hash"):
        CostTable.load(tmp_path / "old.json")
    assert CostTable.load(tmp_path / "old.json", allow_edited=True).quantiles == (0.5, 0.99)
    r = runner.invoke(app, ["validate", str(tmp_path / "old.json"), str(made["samples"])])
    assert r.exit_code == 2 and r.output.startswith("error: ") and "no content_hash" in r.output
    assert len(r.output.strip().splitlines()) == 1
    r = runner.invoke(app, ["validate", str(tmp_path / "old.json"), str(made["samples"]),
                            "--allow-edited"])  # fmt: skip
    assert r.exit_code in (0, 1, 2) and "verdict:" in r.output
    doc["content_hash"] = "md5:abc"
    (tmp_path / "odd.json").write_text(json.dumps(doc))
    with pytest.raises(InputError, match="content_hash"):
        CostTable.load(tmp_path / "odd.json")


def doc_hash(path: Path) -> str:
    return json.loads(path.read_text())["content_hash"]


def _other_model_samples(made, where: Path, **changes) -> Path:
    frame = pd.read_parquet(made["samples"])
    write_samples(frame, where, {**PROV, **changes})
    return where


def _warnings(output: str) -> list[str]:
    return [x for x in output.splitlines() if x.startswith("warning: ")]


def test_simulate_with_a_table_of_another_model_is_refused(made, tmp_path: Path) -> None:
    truth = _other_model_samples(made, tmp_path / "other.parquet", model="mistral-7b", tp=2)
    args = ["simulate", "--workload", "chat", "--policy", "sloweave", "--tpot-slo", "50",
            "--seeds", "2", "--requests", "10", "--predictor", str(made["table"]),
            "--truth", f"samples:{truth}"]  # fmt: skip
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "b")])
    assert r.exit_code == 2 and r.output.startswith("error: fingerprint mismatch"), r.output
    assert "model 'analytic' vs 'mistral-7b'" in r.output and "tp 1 vs 2" in r.output
    assert "--allow-mismatch" in r.output and len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "b").exists()
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "a"), "--allow-mismatch"])
    assert r.exit_code == 0, r.output
    warned = _warnings(r.output)
    assert len(warned) == 1 and "model 'analytic' vs 'mistral-7b'" in warned[0], r.output
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "c"), "--allow-mismatch", "--strict"])
    assert r.exit_code == 2 and "fingerprint mismatch" in r.output


def test_a_table_of_another_device_than_the_truth_is_refused(made, tmp_path: Path) -> None:
    # the table was fitted on "synthetic" samples; the device truth is simulated (an A100)
    args = ["simulate", "--workload", "chat", "--policy", "fixed-256", "--tpot-slo", "50",
            "--seeds", "1", "--requests", "10", "--predictor", str(made["table"]),
            "--out", str(tmp_path / "d")]  # fmt: skip
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "device_name 'synthetic' vs 'simulated'" in r.output, r.output
    assert "--truth device" in r.output
    compare = ["compare", "--workloads", "chat", "--policies", "fixed-256", "--tpot-slo", "50",
               "--seeds", "1", "--requests", "10", "--predictor", str(made["table"]),
               "--out", str(tmp_path / "e")]  # fmt: skip
    r = runner.invoke(app, compare)
    assert r.exit_code == 2 and "fingerprint mismatch" in r.output
    assert runner.invoke(app, [*args, "--allow-mismatch"]).exit_code == 0


def test_validate_refuses_a_table_of_another_device(made, tmp_path: Path) -> None:
    other = _other_model_samples(made, tmp_path / "gpu.parquet", device_name="NVIDIA H100")
    r = runner.invoke(app, ["validate", str(made["table"]), str(other)])
    assert r.exit_code == 2 and "device_name 'synthetic' vs 'NVIDIA H100'" in r.output
    assert len(r.output.strip().splitlines()) == 1
    r = runner.invoke(app, ["validate", str(made["table"]), str(other), "--allow-mismatch"])
    assert r.exit_code == 0 and "warning: fingerprint mismatch" in r.output


def test_report_compares_tables_with_their_measurements(made, tmp_path: Path) -> None:
    cal = tmp_path / "cal"
    cal.mkdir()
    _other_model_samples(made, cal / "samples.parquet", model_hash="m9")
    CostTable.load(made["table"]).save(cal / "costtable.json")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = runner.invoke(app, ["report", str(cal), "--out", str(tmp_path / "r"),
                                "--allow-mismatch"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert len(_warnings(r.output)) == 1 and "model_hash 'm1' vs 'm9'" in r.output
    r = runner.invoke(app, ["report", str(cal), "--out", str(tmp_path / "r2")])
    assert r.exit_code == 2 and "fingerprint mismatch" in r.output


def test_keys_one_side_lacks_are_not_compared(made, tmp_path: Path) -> None:
    older = {"device_name": "synthetic"}  # an older calibration: no model, hash, tp
    write_samples(pd.read_parquet(made["samples"]), tmp_path / "s.parquet", older)
    r = runner.invoke(app, ["eval", str(made["table"]), str(tmp_path / "s.parquet"), "--strict"])
    assert r.exit_code == 0 and not _warnings(r.output), r.output
