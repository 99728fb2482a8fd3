"""The audit's remaining cases (issue 38): each answers with one line ``error: ...`` and
exit 2, never a traceback, never a default silently used, never a half-written file."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from plankit import device, plan_head
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels.samples import write_samples
from servecal.costmodels.synthetic import SyntheticTruth, grid_points

runner = CliRunner()
CPU_TINY = {"device_name": "cpu", "model": "tiny", "model_hash": "t1", "tp": 1}


def _one_line_exit_2(args: list[str], *words: str) -> str:
    r = runner.invoke(app, args)
    out = r.output.strip()
    assert r.exit_code == 2, out
    assert "Traceback" not in out and len(out.splitlines()) == 1, out
    assert out.startswith("error: "), out
    for word in words:
        assert word in out, out
    return out


@pytest.fixture(scope="module")
def cpu_tiny_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A table with a CPU ``tiny`` calibration's fingerprint (drawn samples, table fit)."""
    from servecal.costmodels.fit import fit_cost_table

    root = tmp_path_factory.mktemp("tiny")
    points = grid_points([1, 4, 16], [0, 64, 256], [64, 512], [0])
    frame = SyntheticTruth(sigma=0.03).draw(points, 8, np.random.default_rng(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_cost_table(frame, CPU_TINY, model="table", seed=0).table.save(root / "t.json")
    write_samples(frame, root / "samples.parquet", CPU_TINY)
    return root / "t.json"


def test_an_absurd_request_count_is_refused_before_it_is_allocated(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    _one_line_exit_2(["simulate", "--workload", "mixed", "--rate", "10", "--policy", "sloweave",
                      "--tpot-slo", "50", "--requests", "99999999999999", "--out", str(out)],
                     "--requests", "at most 10,000,000")  # fmt: skip
    assert not out.exists()


def test_a_model_shape_too_big_to_allocate_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    shape = tmp_path / "huge.json"
    shape.write_text(json.dumps({"name": "huge", "hidden": 1 << 20, "n_layers": 2,
                                 "n_heads": 64, "n_kv_heads": 8, "head_dim": 1 << 14,
                                 "intermediate": 1 << 22, "vocab": 1_000_000}))  # fmt: skip
    out = tmp_path / "cal"
    _one_line_exit_2(["calibrate", "--device", "cpu", "--model", str(shape), "--out", str(out)],
                     "model shape 'huge'", "do not fit in cpu's memory")  # fmt: skip
    assert not (out / "shards" / "plan.json").exists()  # nothing to --resume


def test_a_damaged_resume_plan_is_named(tmp_path: Path) -> None:
    plan = tmp_path / "cal" / "shards" / "plan.json"
    plan.parent.mkdir(parents=True)
    plan.write_text(json.dumps({"schema": "servecal.calibration-plan/1", "device": "cpu"}))
    _one_line_exit_2(["calibrate", "--device", "cpu", "--out", str(tmp_path / "cal"), "--resume"],
                     str(plan), "damaged plan", "shape")  # fmt: skip


@pytest.mark.parametrize("spec", ["short-long:", "short-long: "])
def test_a_generated_workload_without_its_fraction_is_refused(spec: str) -> None:
    _one_line_exit_2(["offline", "--generate", spec], "--generate", "short fraction")


@pytest.mark.parametrize("flag", ["--family", "--model"])
def test_an_empty_fit_family_is_refused_not_auto(flag: str, cpu_tiny_table: Path) -> None:
    samples = cpu_tiny_table.parent / "samples.parquet"
    out = cpu_tiny_table.parent / "never.json"
    _one_line_exit_2(["fit", str(samples), "--out", str(out), flag, ""], f"{flag} ''")
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["fit", "{samples}", "--out", "{dir}/t.parquet"], ("a cost table", ".json")),
        (["export", "{table}", "--out", "{dir}/x.json"], ("the long form",)),
        (["export", "{table}", "--format", "parquet", "--out", "{dir}/x.csv"], (".parquet",)),
        (["export", "{table}", "--format", "csv", "--out", "{dir}/x.parquet"], (".csv",)),
        (["import", "vidur", "{dir}/p.csv", "--model", "llama-3-8b", "--out", "{dir}/s.csv"],
         ("a samples file", "s.parquet")),
    ],
)  # fmt: skip
def test_an_output_suffix_decides_its_format_or_is_refused(
    args: list[str], words: tuple[str, ...], cpu_tiny_table: Path, tmp_path: Path
) -> None:
    where = {"samples": str(cpu_tiny_table.parent / "samples.parquet"),
             "table": str(cpu_tiny_table), "dir": str(tmp_path)}  # fmt: skip
    (tmp_path / "p.csv").write_text("not read: the name is refused first\n")
    _one_line_exit_2([a.format(**where) for a in args], *words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.csv"]  # nothing written


def test_export_without_format_takes_the_suffixs(cpu_tiny_table: Path, tmp_path: Path) -> None:
    r = runner.invoke(app, ["export", str(cpu_tiny_table), "--out", str(tmp_path / "x.csv")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "x.csv").read_bytes()[:4] != b"PAR1"  # text, not Parquet
    assert (tmp_path / "x.csv").read_text().startswith("n_decode")


PLAN = plan_head(50, 20, 50, 0.5, (1, 1), ["fixed-512"], ["round-robin"]) + device(
    "A100", 2.0, truth="device", predictor="{table}"
)


def test_plan_refuses_a_table_of_another_device_than_its_truth(
    cpu_tiny_table: Path, tmp_path: Path
) -> None:
    """An A100 llama-3-8b truth (the simulated device) planned with a CPU ``tiny`` table:
    refused as ``simulate`` refuses the same pair; ``--allow-mismatch`` warns and plans."""
    space = tmp_path / "plan.toml"
    space.write_text(PLAN.format(table=cpu_tiny_table))
    args = ["plan", str(space), "--jobs", "1", "--no-frontier"]
    _one_line_exit_2([*args, "--out", str(tmp_path / "refused")], "fingerprint mismatch",
                     "device_name 'cpu' vs 'simulated'", "--allow-mismatch")  # fmt: skip
    _one_line_exit_2([*args, "--out", str(tmp_path / "strict"), "--strict"], "fingerprint mismatch")
    assert not (tmp_path / "refused").exists()
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "allowed"), "--allow-mismatch"])
    assert r.exit_code == 0, r.output
    assert [x for x in r.output.splitlines() if x.startswith("warning: ")], r.output
