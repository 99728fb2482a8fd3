"""``validate`` and ``simulate --predictor`` refuse a table of another TP degree, and with
``--allow-mismatch`` warn (one line)."""

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


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from servecal.costmodels.fit import fit_cost_table

    root = tmp_path_factory.mktemp("tp")
    calib = TRUTH.draw(POINTS, 20, np.random.default_rng(1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = fit_cost_table(calib, {"device": "synthetic", "tp": 4}, seed=0).table
    table.save(root / "tp4.json")
    fresh = TRUTH.draw(POINTS, 20, np.random.default_rng(7))
    out = {"table": root / "tp4.json"}
    for name, prov in (("tp1", {"device": "synthetic"}), ("tp4", {"device": "synthetic", "tp": 4})):
        (root / name).mkdir()
        out[name] = root / name / f"{name}.parquet"
        write_samples(fresh, out[name], prov)
    return out


def warning_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("warning:")]


def test_validate_warns_once_when_the_samples_are_another_tp(files) -> None:
    refused = runner.invoke(app, ["validate", str(files["table"]), str(files["tp1"])])
    assert refused.exit_code == 2 and "(tp 4 vs 1)" in refused.output
    r = runner.invoke(app, ["validate", str(files["table"]), str(files["tp1"]), "--allow-mismatch"])
    assert r.exit_code == 0, r.output
    (line,) = warning_lines(r)
    assert "fingerprint mismatch" in line and "(tp 4 vs 1)" in line
    assert r.stdout.startswith("verdict: valid")
    same = runner.invoke(app, ["validate", str(files["table"]), str(files["tp4"])])
    assert same.exit_code == 0 and not warning_lines(same)


def simulate(files, out: Path, truth: str) -> object:
    args = ["simulate", "--workload", "chat", "--policy", "fixed-256", "--tpot-slo", "50",
            "--rate", "5", "--seeds", "1", "--requests", "30", "--out", str(out),
            "--truth", truth, "--predictor", str(files["table"]), "--json",
            "--allow-mismatch"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result


def test_simulate_warns_when_its_truth_samples_are_another_tp(files, tmp_path) -> None:
    r = simulate(files, tmp_path / "a", f"samples:{files['tp1']}")
    (line,) = warning_lines(r)
    assert "fingerprint mismatch" in line and "(tp 4 vs 1)" in line
    assert not warning_lines(simulate(files, tmp_path / "b", f"samples:{files['tp4']}"))
    assert not warning_lines(simulate(files, tmp_path / "c", "analytic"))  # no TP to compare
    # validating the run folder compares with the run's truth samples
    v = runner.invoke(app, ["validate", str(files["table"]), str(tmp_path / "a" / "seed-0"),
                            "--allow-mismatch"])  # fmt: skip
    assert v.exit_code in (0, 1) and len(warning_lines(v)) == 1
