"""Every class of bad input gets one line ``error: ...`` and exit 2: never a traceback.

One test per class: unwritable ``--out`` for every command that writes, numbers too
large for a float in a table, JSON nested too deeply, out-of-range flags, non-finite
values, text where a number belongs, booleans stored as times, corrupt run logs.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels.samples import write_samples
from servecal.costmodels.synthetic import SyntheticTruth, grid_points

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "samples_analytic.parquet"
VIDUR = Path(__file__).resolve().parents[1] / "data" / "profiler" / "vidur"
SIM = ["--workload", "chat", "--policy", "fixed-256", "--tpot-slo", "50", "--seeds", "1",
       "--requests", "10"]  # fmt: skip
COMPARE = ["--workloads", "chat", "--policies", "fixed-256", "--tpot-slo", "50", "--seeds", "1",
           "--requests", "10", "--jobs", "1"]  # fmt: skip


def one_error_line(args: list[str]) -> str:
    r = runner.invoke(app, args)
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and "╭" not in r.output, r.output
    errors = [x for x in lines if x.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], r.output
    return errors[0]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from servecal.costmodels.fit import fit_cost_table

    root = tmp_path_factory.mktemp("bad")
    frame = SyntheticTruth().draw(
        grid_points([1, 8, 32], [0, 64, 256, 1024]), 10, np.random.default_rng(0)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = fit_cost_table(frame, {"device_name": "synthetic"}).table
    table.save(root / "table.json")
    write_samples(frame, root / "samples.parquet", {"device_name": "synthetic"})
    (root / "a_file").write_text("not a folder\n")
    (root / "a_folder").mkdir()
    r = runner.invoke(app, ["simulate", *SIM, "--out", str(root / "sim")])
    assert r.exit_code == 0, r.output
    return {
        "root": root,
        "table": root / "table.json",
        "samples": root / "samples.parquet",
        "file": root / "a_file",
        "folder": root / "a_folder",
        "run": root / "sim" / "seed-0",
    }


def _unwritable(work: dict[str, Path], want: str) -> list[Path]:
    """Outputs that cannot be written: for a file output, a folder; for a folder output,
    a file; either way a path under a file, and one under /proc (where nothing is created)."""
    bad = [work["folder"] if want == "file" else work["file"], work["file"] / "x"]
    if Path("/proc/self").is_dir():
        bad.append(Path("/proc/servecal-x/y"))
    return bad


@pytest.mark.parametrize(
    ("command", "want"),
    [
        (lambda w, o: ["export", str(w["table"]), "--out", o], "file"),
        (lambda w, o: ["fit", str(w["samples"]), "--out", o], "file"),
        (lambda w, o: ["import", "vidur", str(VIDUR), "--model", "llama-3-8b", "--out", o],
         "file"),
        (lambda w, o: ["simulate", *SIM, "--out", o], "folder"),
        (lambda w, o: ["compare", *COMPARE, "--out", o], "folder"),
        (lambda w, o: ["report", str(w["run"]), "--out", o], "folder"),
        (lambda w, o: ["calibrate", "--device", "cpu", "--budget", "5", "--out", o], "folder"),
        (lambda w, o: ["demo", "--device", "cpu", "--budget", "60", "--out", o], "folder"),
    ],
    ids=["export", "fit", "import", "simulate", "compare", "report", "calibrate", "demo"],
)  # fmt: skip
def test_every_command_with_an_unwritable_out(work, command, want: str) -> None:
    for out in _unwritable(work, want):
        line = one_error_line(command(work, str(out)))
        assert str(out) in line or str(out.parent) in line, line
    assert work["file"].read_text() == "not a folder\n"  # nothing was written over it


def _huge_table(work: dict[str, Path], where: Path) -> Path:
    doc = json.loads(work["table"].read_text())
    text = json.dumps(doc).replace(
        json.dumps(doc["quantiles"]["0.5"][3]), "1" + "0" * 400, 1
    )  # an integer no float can hold
    where.write_text(text)
    return where


def test_numbers_too_large_for_a_float_in_a_table(work, tmp_path: Path) -> None:
    table = str(_huge_table(work, tmp_path / "huge.json"))
    samples = str(work["samples"])
    for args in (
        ["validate", table, samples],
        ["eval", table, samples],
        ["export", table, "--out", str(tmp_path / "x.csv")],
        ["simulate", *SIM, "--predictor", table, "--truth", f"samples:{samples}",
         "--out", str(tmp_path / "s")],
        ["compare", *COMPARE, "--predictor", table, "--truth", f"samples:{samples}",
         "--out", str(tmp_path / "c")],
    ):  # fmt: skip
        line = one_error_line(args)
        assert "huge.json" in line and "too large" in line
    cal = tmp_path / "cal"
    cal.mkdir()
    write_samples(pd.read_parquet(samples), cal / "samples.parquet", {})
    _huge_table(work, cal / "costtable.json")
    assert "too large" in one_error_line(["report", str(cal), "--out", str(tmp_path / "r")])


def test_json_nested_too_deeply(work, tmp_path: Path) -> None:
    deep = "[" * 50_000 + "]" * 50_000
    (tmp_path / "deep.json").write_text(deep)
    for args in (
        ["validate", str(tmp_path / "deep.json"), str(work["samples"])],
        ["eval", str(tmp_path / "deep.json"), str(work["samples"])],
        ["calibrate", "--device", "cpu", "--grid", str(tmp_path / "deep.json"),
         "--out", str(tmp_path / "c")],
        ["import", "vidur", str(VIDUR), "--model", str(tmp_path / "deep.json"),
         "--out", str(tmp_path / "i.parquet")],
    ):  # fmt: skip
        line = one_error_line(args)
        assert "nested too deeply" in line and "deep.json" in line
    run = tmp_path / "run"
    run.mkdir()
    for name in ("iterations.parquet", "requests.parquet"):
        (run / name).write_bytes((work["run"] / name).read_bytes())
    (run / "run.json").write_text('{"config": ' + deep + "}")
    assert "run.json" in one_error_line(["report", str(run), "--out", str(tmp_path / "r")])


@pytest.mark.parametrize(
    "args",
    [
        ["offline", "--generate", "short-long:0.5", "--n", "10", "--seed", "-1"],
        ["fit", "SAMPLES", "--out", "OUT/t.json", "--seed", "-1"],
        ["calibrate", "--device", "cpu", "--out", "OUT/c", "--seed", "-1"],
        ["simulate", *SIM, "--out", "OUT/s", "--kv-tokens", "0"],
        ["compare", *COMPARE[:-2], "--out", "OUT/c", "--kv-tokens", "0"],
        ["compare", *COMPARE[:-2], "--out", "OUT/c", "--jobs", "0"],
        ["demo", "--out", "OUT/d", "--jobs", "0"],
        ["calibrate", "--device", "cpu", "--out", "OUT/c", "--budget", "nan"],
        ["calibrate", "--device", "cpu", "--out", "OUT/c", "--budget", "inf"],
        ["simulate", *SIM, "--out", "OUT/s", "--drift", "0s:inf"],
        ["simulate", *SIM, "--out", "OUT/s", "--drift", "inf:1.1"],
        ["simulate", *SIM, "--out", "OUT/s", "--drift", "0s:nan"],
        ["simulate", *SIM, "--out", "OUT/s", "--truth", "analytic:sigma=nan"],
        ["simulate", *SIM, "--out", "OUT/s", "--truth", "analytic:sigma=1e400"],
    ],
    ids=["offline-seed", "fit-seed", "calibrate-seed", "simulate-kv", "compare-kv",
         "compare-jobs", "demo-jobs", "budget-nan", "budget-inf", "drift-inf", "drift-at-inf",
         "drift-nan", "truth-nan", "truth-overflow"],
)  # fmt: skip
def test_out_of_range_and_non_finite_flags(work, tmp_path: Path, args: list[str]) -> None:
    args = [a.replace("SAMPLES", str(work["samples"])).replace("OUT", str(tmp_path)) for a in args]
    one_error_line(args)
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_trace_lengths_beyond_any_prompt(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("prompt_tokens,output_tokens,arrival_s\n100,10,0.0\n1e30,5,0.5\n")
    args = ["simulate", "--workload", f"trace:{trace}", "--policy", "full", "--tpot-slo", "25",
            "--seeds", "1", "--out", str(tmp_path / "o")]  # fmt: skip
    line = one_error_line(args)
    assert "line 3" in line and "prompt_tokens" in line


def test_times_stored_as_booleans_and_counts_too_large(work, tmp_path: Path) -> None:
    frame = pd.read_parquet(work["samples"])
    frame.assign(ms=frame["ms"] > 1.0).to_parquet(tmp_path / "bool.parquet")
    for args in (
        ["fit", str(tmp_path / "bool.parquet"), "--out", str(tmp_path / "t.json")],
        ["eval", str(work["table"]), str(tmp_path / "bool.parquet")],
        ["validate", str(work["table"]), str(tmp_path / "bool.parquet")],
    ):
        assert "'ms'" in (line := one_error_line(args)) and "true/false" in line
    frame.assign(chunk=frame["chunk"].astype(float) * 1e30).to_parquet(tmp_path / "big.parquet")
    assert "too large" in one_error_line(["fit", str(tmp_path / "big.parquet"), "--out",
                                          str(tmp_path / "t.json")])  # fmt: skip


def test_run_summary_with_text_where_numbers_belong(work, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for name in ("iterations.parquet", "requests.parquet", "run.json"):
        (run / name).write_bytes((work["run"] / name).read_bytes())
    doc = json.loads((run / "run.json").read_text())
    doc["summary"]["goodput"] = "fast"
    (run / "run.json").write_text(json.dumps(doc))
    line = one_error_line(["report", str(run), "--out", str(tmp_path / "r")])
    assert "summary.goodput" in line and "expected a number" in line


def test_run_folder_with_nan_or_negative_rows_is_refused(work, tmp_path: Path) -> None:
    it = pd.read_parquet(work["run"] / "iterations.parquet")
    for column, value in (("duration_ms", np.nan), ("n_decode", -1)):
        run = tmp_path / column
        run.mkdir()
        bad = it.copy()
        bad[column] = bad[column].astype(float)
        bad.loc[bad.index[2], column] = value
        bad.to_parquet(run / "iterations.parquet")
        line = one_error_line(["validate", str(work["table"]), str(run)])
        assert f"'{column}', row 2" in line


def test_click_usage_errors_are_one_line(work) -> None:
    assert "Missing argument" in one_error_line(["fit"])
    assert "No such option" in one_error_line(["eval", "--nope"])
    assert "--seed" in one_error_line(["fit", str(work["samples"]), "--out", "x", "--seed", "a"])
    assert "No such command" in one_error_line(["frobnicate"])
