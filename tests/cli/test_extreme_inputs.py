"""Corrupt and extreme inputs: one line ``error: ...`` and exit 2, before any work, and
nothing half-written or overwritten (one test per class of input)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels import CostTable, InputError
from servecal.costmodels.samples import read_provenance, read_samples, write_samples

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "samples_analytic.parquet"
AIC = ROOT / "tests" / "data" / "profiler" / "aiconfigurator"


def refused(args: list[str], *says: str) -> str:
    r = runner.invoke(app, args)
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code == 2, r.output
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    for text in says:
        assert text in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("extreme") / "t.json"
    r = runner.invoke(app, ["fit", str(EXAMPLE), "--out", str(out), "--family", "piecewise"])
    assert r.exit_code == 0, r.output
    return out


def test_a_truncated_profile_csv_is_refused(tmp_path: Path) -> None:
    cut = tmp_path / "aic"
    shutil.copytree(AIC, cut)
    gemm = next(cut.glob("*gemm_perf*.csv"))
    text = gemm.read_bytes()
    gemm.write_bytes(text[: len(text) * 2 // 3])  # a copy that stopped mid-line
    args = ["import", "aiconfigurator", str(cut), "--model", "llama-3-8b",
            "--out", str(tmp_path / "s.parquet")]  # fmt: skip
    refused(args, gemm.name, "truncated")
    assert not (tmp_path / "s.parquet").exists()
    lines = text.decode().splitlines(keepends=True)
    gemm.write_text("".join(lines[:-3]) + lines[-3].split(",")[0] + ",,\n")  # empty fields
    refused(args, "missing value")


def test_a_datetime_ms_column_is_not_read_as_nanoseconds(tmp_path: Path) -> None:
    frame = read_samples(EXAMPLE).frame.head(40)
    frame = frame.assign(ms=pd.to_datetime(frame["ms"], unit="ms"))
    frame.to_parquet(tmp_path / "dt.parquet")
    refused(["fit", str(tmp_path / "dt.parquet"), "--out", str(tmp_path / "t.json")],
            "column 'ms'", "dates/times")  # fmt: skip
    assert not (tmp_path / "t.json").exists()


def test_a_table_with_0_ms_cells_is_refused_by_its_loader(table: Path, tmp_path: Path) -> None:
    doc = json.loads(table.read_text())
    doc["quantiles"] = {q: [0.0] * len(v) for q, v in doc["quantiles"].items()}
    doc.pop("content_hash")
    (tmp_path / "zero.json").write_text(json.dumps(doc))
    with pytest.raises(InputError, match="cells of <= 0 ms"):
        CostTable.load(tmp_path / "zero.json", allow_edited=True)
    refused(["eval", str(tmp_path / "zero.json"), str(EXAMPLE), "--allow-edited"], "<= 0 ms")


def test_a_fit_that_makes_an_unloadable_table_writes_nothing(
    table: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import servecal.costmodels.fit as fit_module

    real = fit_module.fit_cost_table

    def zeroed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - a fit gone wrong
        result = real(*args, **kwargs)
        doc = result.table.to_json()
        size = len(doc["quantiles"]["0.5"])
        broken = CostTable(
            axes=doc["axes"],
            quantiles={0.5: [0.0] * size},
            fingerprint=doc["fingerprint"],
        )
        return dataclasses.replace(result, table=broken)

    monkeypatch.setattr(fit_module, "fit_cost_table", zeroed)
    out = tmp_path / "t.json"
    refused(["fit", str(EXAMPLE), "--out", str(out), "--family", "piecewise"],
            "does not load")  # fmt: skip
    assert not out.exists()


def test_imports_share_a_folder_each_with_its_own_sidecar(tmp_path: Path) -> None:
    base = ["import", "aiconfigurator", str(AIC), "--model"]
    # a .json name is refused by its suffix (a samples file is Parquet) before it can
    # reach a sidecar: either way no sidecar is overwritten
    refused([*base, "llama-3-8b", "--out", str(tmp_path / "fingerprint.json")], ".parquet")
    refused([*base, "llama-3-8b", "--out", str(tmp_path / "a.fingerprint.json")], ".parquet")
    assert not list(tmp_path.iterdir())
    for name, model in (("a", "llama-3-8b"), ("b", "mistral-7b")):
        done = runner.invoke(app, [*base, model, "--out", str(tmp_path / f"{name}.parquet")])
        assert done.exit_code == 0, done.output
    for name, model in (("a", "llama-3-8b"), ("b", "mistral-7b")):
        side = json.loads((tmp_path / f"{name}.fingerprint.json").read_text())
        assert side["model"] == model
        assert read_provenance(tmp_path / f"{name}.parquet")["model"] == model
    assert not (tmp_path / "fingerprint.json").exists()


def test_duplicate_json_keys_are_refused(table: Path, tmp_path: Path) -> None:
    grid = tmp_path / "grid.json"
    grid.write_text('{"n_decode": [1, 8], "n_decode": [1, 64], "chunk": [0, 64], '
                    '"ctx": [0], "prefix": [0]}')  # fmt: skip
    refused(["import", "aiconfigurator", str(AIC), "--model", "llama-3-8b", "--grid",
             str(grid), "--out", str(tmp_path / "s.parquet")],
            "'n_decode' given twice")  # fmt: skip
    text = table.read_text()
    dup = text.replace('"between":', '"between": "round_up", "between":', 1)
    (tmp_path / "dup.json").write_text(dup)
    refused(["eval", str(tmp_path / "dup.json"), str(EXAMPLE)], "'between' given twice")


@pytest.mark.parametrize(
    ("grid", "says"),
    [
        ({"n_decode": [1, 10**12], "chunk": [0, 64], "ctx": [0], "prefix": [0]}, "at most"),
        ({"n_decode": list(range(1, 2001)), "chunk": list(range(2000)), "ctx": [0],
          "prefix": [0]}, "4,000,000 points"),
    ],
    ids=["huge-value", "huge-grid"],
)  # fmt: skip
def test_extreme_grids_are_refused_before_any_work(tmp_path: Path, grid, says) -> None:
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(grid))
    refused(["import", "aiconfigurator", str(AIC), "--model", "llama-3-8b", "--grid", str(path),
             "--out", str(tmp_path / "s.parquet")], says)  # fmt: skip


@pytest.mark.parametrize("flag", ["--truth", "--predictor"])
def test_an_empty_truth_or_predictor_is_not_the_default(tmp_path: Path, flag: str) -> None:
    refused(["simulate", "--workload", "chat", "--policy", "fixed-256", "--tpot-slo", "50",
             flag, "", "--out", str(tmp_path / "o")], f"{flag} ''")  # fmt: skip
    assert not (tmp_path / "o").exists()


def test_tp_and_threads_beyond_any_machine_are_refused(tmp_path: Path) -> None:
    refused(["import", "aiconfigurator", str(AIC), "--model", "llama-3-8b", "--tp",
             str(10**20), "--out", str(tmp_path / "s.parquet")], "--tp")  # fmt: skip
    refused(["calibrate", "--device", "cpu", "--model", "tiny", "--threads", "100000",
             "--out", str(tmp_path / "cal")], "--threads 100000")  # fmt: skip
    assert not (tmp_path / "cal").exists()
    doc = json.loads(read_json_table(tmp_path))
    doc["tp"] = 10**20
    (tmp_path / "tp.json").write_text(json.dumps(doc))
    with pytest.raises(InputError, match="field 'tp'"):
        CostTable.load(tmp_path / "tp.json", allow_edited=True)


def read_json_table(tmp_path: Path) -> str:
    out = tmp_path / "small.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = runner.invoke(app, ["fit", str(EXAMPLE), "--out", str(out), "--family", "piecewise"])
    assert r.exit_code == 0, r.output
    return out.read_text()


@pytest.mark.parametrize(
    ("flag", "value"), [("--n", "100000000"), ("--polish", "100000000"), ("--seeds", "10000000")]
)
def test_offline_is_bounded(flag: str, value: str) -> None:
    refused(["offline", "--generate", "short-long:0.8", flag, value], f"{flag} {value}", "at most")


def test_a_run_of_a_newer_schema_is_not_reported(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    r = runner.invoke(app, ["simulate", "--workload", "chat", "--policy", "fixed-256",
                            "--tpot-slo", "50", "--seeds", "1", "--requests", "20",
                            "--out", str(out)])  # fmt: skip
    assert r.exit_code == 0, r.output
    run = out / "seed-0" / "run.json"
    doc = json.loads(run.read_text())
    doc["schema"] = "servecal.run/99"
    run.write_text(json.dumps(doc))
    refused(["report", str(out), "--out", str(tmp_path / "rep")], "servecal.run/99")


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"name": "."}, "must not start with '.'"),
        ({"name": ".."}, "must not start with '.'"),
        ({"tp": 10**20}, "tp"),
        ({"tp": 3}, "does not divide"),
        ({"budget": float("nan")}, "finite"),
        ({"budget": float("inf")}, "finite"),
        ({"device": "banana"}, "device 'banana'"),
        ({"threads": 100000}, "threads must be at most"),
    ],
    ids=[
        "dot",
        "dotdot",
        "huge-tp",
        "odd-tp",
        "nan-budget",
        "inf-budget",
        "unknown-device",
        "huge-threads",
    ],  # fmt: skip
)
def test_a_bad_fleet_plan_is_refused_before_anything_runs(tmp_path: Path, entry, says) -> None:
    job = {"name": "one", "device": "cpu", "model": "tiny", **entry}
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"job": [job]}))
    refused(["fleet", str(plan), "--out", str(tmp_path / "fleet")], says)
    assert not (tmp_path / "fleet" / "jobs").exists()


def test_a_second_fleet_on_one_folder_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "fleet"
    hold = (
        "import sys, time\nfrom servecal.util.folders import folder_lock\n"
        "with folder_lock(sys.argv[1], 'servecal fleet'):\n    print('held', flush=True)\n"
        "    time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold, str(out)], stdout=subprocess.PIPE)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"job": [{"name": "one", "device": "cpu", "model": "tiny"}]}))
    try:
        assert holder.stdout.readline().strip() == b"held"
        refused(["fleet", str(plan), "--out", str(out)], f"pid {holder.pid}",
                "another servecal fleet is writing")  # fmt: skip
    finally:
        holder.kill()
        holder.wait()
    assert not (out / "jobs").exists() and not (out / "index.json").exists()


def test_an_old_folders_fingerprint_json_is_still_read(tmp_path: Path) -> None:
    frame = read_samples(EXAMPLE).frame.head(20)
    frame.to_csv(tmp_path / "old.csv", index=False)
    (tmp_path / "fingerprint.json").write_text(json.dumps({"model": "m0"}))
    assert read_samples(tmp_path / "old.csv").provenance == {"model": "m0"}
    write_samples(frame, tmp_path / "new.parquet", {"model": "m1"})  # beside it: fine
    assert read_samples(tmp_path / "new.parquet").provenance == {"model": "m1"}
    assert read_samples(tmp_path / "old.csv").provenance == {"model": "m0"}
    frame.to_csv(tmp_path / "new.csv", index=False)  # a CSV reads its own sidecar first
    assert read_samples(tmp_path / "new.csv").provenance == {"model": "m1"}
