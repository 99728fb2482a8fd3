"""`servecal fleet` on the local backend: folders, index, dataset, failures, rerun, report."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import pyarrow.dataset as ds
import pytest
from fleetkit import GRID, two_cpu_jobs, write_plan
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels.samples import read_samples
from servecal.costmodels.table import CostTable

# The module's fleet is built once: keep its tests on one xdist worker.
pytestmark = pytest.mark.xdist_group("fleet-local")
runner = CliRunner()
VIDUR = Path(__file__).parents[2] / "data" / "profiler" / "vidur"
POINTS = 9  # the design of GRID (ctx, prefix collapse where nothing decodes / prefills)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Two tiny CPU jobs, one that fails inside calibrate (more layers than the model has)
    and one TP-2 import of a Vidur A100 profile."""
    folder = tmp_path_factory.mktemp("fleet")
    jobs = [
        *two_cpu_jobs(),
        {"name": "too-deep", "device": "cpu", "model": "tiny", "layers": 9},
        {"kind": "import", "source": "vidur", "path": str(VIDUR), "device": "A100",
         "model": "llama-3-8b", "tp": 2},
    ]  # fmt: skip
    plan = write_plan(folder, jobs)
    out = folder / "out"
    result = runner.invoke(app, ["fleet", str(plan), "--out", str(out)])
    return plan, out, result


def test_each_job_writes_a_calibration_folder_and_the_failure_is_recorded(fleet):
    _, out, result = fleet
    assert result.exit_code == 1, result.output
    assert "failed: too-deep" in result.output and "rerun" in result.output
    index = json.loads((out / "index.json").read_text())
    jobs = index["jobs"]
    assert list(jobs) == ["tiny-a", "tiny-b", "too-deep", "a100-llama-3-8b-tp2-vidur"]
    bad = jobs["too-deep"]
    assert bad["status"] == "failed"
    assert bad["error"] == "--layers 9: tiny has only 4 layers"
    for name in ("tiny-a", "tiny-b"):
        entry = jobs[name]
        assert entry["status"] == "ok" and entry["error"] is None
        folder = out / entry["folder"]
        for file in (
            "samples.parquet",
            "samples.fingerprint.json",
            "costtable.json",
            "shards/plan.json",
        ):
            assert (folder / file).is_file(), file
        table = CostTable.load(out / entry["table"])
        # the table spans the plan's grid (a fitted model may add breakpoints inside it)
        assert set(GRID["n_decode"]) <= set(table.axes["n_decode"])
        assert table.domain["n_decode"] == (min(GRID["n_decode"]), max(GRID["n_decode"]))
        assert entry["fingerprint"]["model_hash"] == table.fingerprint["model_hash"]
        assert entry["points_measured"] == entry["points_planned"] == POINTS
        for key in ("p50_mape", "p99_coverage"):  # the held-out figures recorded at fit
            assert entry["metrics"][key] == pytest.approx(table.validation[key])
        assert entry["where"]["backend"] == "local" and entry["where"]["host"]
        assert entry["wall_s"] > 0 and entry["fingerprint_mismatch"] == []


def test_an_import_job_writes_a_median_table_and_joins_the_dataset(fleet):
    _, out, _ = fleet
    entry = json.loads((out / "index.json").read_text())["jobs"]["a100-llama-3-8b-tp2-vidur"]
    assert entry["status"] == "ok" and entry["fingerprint_mismatch"] == []
    assert entry["fingerprint"]["tp"] == 2 and "Vidur" in entry["fingerprint"]["device_name"]
    assert entry["metrics"]["p99_coverage"] is None  # medians: no tail to cover
    assert CostTable.load(out / entry["table"]).tail is None
    assert (
        entry["dataset"]
        == "samples/device=a100/model=llama-3-8b/tp=2/a100-llama-3-8b-tp2-vidur.parquet"
    )


def test_combined_dataset_is_hive_partitioned_and_reads_with_pyarrow_and_pandas(fleet):
    _, out, _ = fleet
    table = ds.dataset(out / "samples", partitioning="hive").to_table()
    frame = table.to_pandas()
    names = ("tiny-a", "tiny-b", "a100-llama-3-8b-tp2-vidur")
    per_job = {n: len(read_samples(out / "jobs" / n / "samples.parquet").frame) for n in names}
    assert len(frame) == sum(per_job.values())
    assert frame.groupby("job").size().to_dict() == per_job
    tiny = frame[frame["job"] != "a100-llama-3-8b-tp2-vidur"]
    assert set(tiny["device"]) == {"cpu"} and set(tiny["model"]) == {"tiny"}
    assert set(tiny["tp"]) == {1} and set(frame["tp"]) == {1, 2}
    assert {"n_decode", "chunk", "ctx", "prefix", "ms", "energy_j", "rep"} <= set(frame.columns)
    assert len(pd.read_parquet(out / "samples")) == len(frame)
    files = sorted(p.relative_to(out).as_posix() for p in (out / "samples").rglob("*.parquet"))
    assert files == [
        "samples/device=a100/model=llama-3-8b/tp=2/a100-llama-3-8b-tp2-vidur.parquet",
        *[f"samples/device=cpu/model=tiny/tp=1/tiny-{k}.parquet" for k in "ab"],
    ]


def test_rerun_keeps_finished_jobs_and_retries_the_failed_one(fleet, tmp_path):
    plan, out, _ = fleet
    before = {p: p.stat().st_mtime_ns for p in (out / "jobs").rglob("*.parquet")}
    result = runner.invoke(app, ["fleet", str(plan), "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert "1 to run" in result.output and "3 finished before" in result.output
    after = {p: p.stat().st_mtime_ns for p in (out / "jobs").rglob("*.parquet")}
    assert after == before  # nothing of a finished job was measured or written again
    jobs = json.loads((out / "index.json").read_text())["jobs"]
    assert [j["status"] for j in jobs.values()] == ["ok", "ok", "failed", "ok"]


def test_a_finished_job_whose_plan_entry_changed_is_not_overwritten(fleet, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(fleet[1], out)  # the module's fleet stays as the other tests expect it
    changed = write_plan(tmp_path, two_cpu_jobs(repeats=13)[:1])
    result = runner.invoke(app, ["fleet", str(changed), "--out", str(out)])
    assert result.exit_code == 1
    entry = json.loads((out / "index.json").read_text())["jobs"]["tiny-a"]
    assert entry["status"] == "failed"
    assert "finished with a different plan entry (changed: repeats)" in entry["error"]
    # Derived data follows the plan: tiny-a is no longer a finished job of it.
    assert not list((out / "samples").rglob("*.parquet"))
    again = write_plan(tmp_path, two_cpu_jobs())  # both finished: nothing runs
    assert runner.invoke(app, ["fleet", str(again), "--out", str(out)]).exit_code == 0
    assert len(list((out / "samples").rglob("*.parquet"))) == 2


def test_report_on_a_fleet_folder_adds_the_jobs_table(fleet, tmp_path):
    _, out, _ = fleet
    result = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "rep")])
    assert result.exit_code == 0, result.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Fleet" in md and "P50 at reference (ms)" in md
    rows = [line for line in md.splitlines() if line.startswith("| tiny-")]
    assert len(rows) == 2 and all("| agrees |" in r for r in rows)
    imported = next(line for line in md.splitlines() if line.startswith("| a100-"))
    cells = [c.strip() for c in imported.split("|")]
    assert float(cells[7]) > 0 and cells[9] == "—"  # a P50; no coverage from medians
    cells = rows[0].split("|")
    assert float(cells[7]) > 0  # P50 of the reference iteration, from the table
    assert "too-deep did not finish: --layers 9: tiny has only 4 layers" in md


def test_report_flags_a_fingerprint_that_disagrees_with_the_plan(fleet, tmp_path):
    _, out, _ = fleet
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    index = json.loads((copy / "index.json").read_text())
    index["jobs"]["tiny-b"]["spec"]["device"] = "H100"  # as if it had been planned on a GPU
    (copy / "index.json").write_text(json.dumps(index))
    result = runner.invoke(app, ["report", str(copy), "--out", str(tmp_path / "rep")])
    assert result.exit_code == 0, result.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "tiny-b: fingerprint disagrees with the plan: device: planned H100, ran on" in md


def test_bad_plans_and_a_missing_ray_are_one_line_exit_2(tmp_path, monkeypatch):
    plan = write_plan(tmp_path, [{"device": "cpu", "model": "tiny", "budgett": 1}])
    result = runner.invoke(app, ["fleet", str(plan), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and result.output.count("\n") == 1
    layout = write_plan(tmp_path, two_cpu_jobs(kv_layout="ragged"))
    result = runner.invoke(app, ["fleet", str(layout), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "job tiny-a: kv_layout 'ragged' is not one of contiguous, paged" in result.output
    assert not (tmp_path / "o").exists()  # refused before anything was written
    good = write_plan(tmp_path, two_cpu_jobs())
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if not installed
    result = runner.invoke(
        app, ["fleet", str(good), "--out", str(tmp_path / "o"), "--backend", "ray"]
    )
    assert result.exit_code == 2
    assert result.output == (
        "error: Ray is not installed: pip install 'servecal[ray]' (or pip install 'ray>=2.50')\n"
    )
