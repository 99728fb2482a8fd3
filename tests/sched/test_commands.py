"""servecal simulate / compare end to end on tiny runs, and their one-line errors."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from servecal.cli import app

runner = CliRunner()


def test_simulate_writes_run_folders_and_prints_json(tmp_path):
    out = tmp_path / "sim"
    args = ["simulate", "--workload", "mixed", "--policy", "sloweave", "--tpot-slo", "25",
            "--rate", "20", "--seeds", "2", "--requests", "60", "--out", str(out),
            "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    for key in ("goodput", "attainment", "p99_ttft_ms", "p99_tpot_ms", "mean_ttft_ms",
                "energy_per_good_request_j", "iterations", "recomputes", "parks",
                "decision_us_median", "online"):  # fmt: skip
        assert key in doc
    # the device truth prices its iterations with the A100 power model (docs/energy.md)
    assert 1.0 < doc["energy_per_good_request_j"] < 100.0
    assert set(doc["online"]) >= {"p50_mape", "p99_coverage"}
    # the default pair: a device truth planned on a table fitted to other samples of it,
    # so the online figures are measured, not 0 / 100% by construction
    assert 0.005 < doc["online"]["p50_mape"] < 0.1 and 0.95 < doc["online"]["p99_coverage"] < 1
    assert "warning" not in result.stderr
    for seed in (0, 1):
        folder = out / f"seed-{seed}"
        run = json.loads((folder / "run.json").read_text())
        assert run["config"]["seed"] == seed
        assert run["energy_source"] == "model:a100-llama3-8b"
        assert (run["config"]["truth"], run["config"]["predictor"]) == ("device", "fitted")
        req = pd.read_parquet(folder / "requests.parquet")
        it = pd.read_parquet(folder / "iterations.parquet")
        assert len(req) == 60 and len(it) == run["summary"]["iterations"]
        assert {"tpot_p99_ms", "slo_exception", "recomputes", "parks"} <= set(req.columns)
        assert {"pred_p99_ms", "margin_ms", "decision_us", "budget_ms"} <= set(it.columns)
    assert not list(tmp_path.glob("**/*.tmp"))


def test_simulate_with_drift_energy_and_max_goodput(tmp_path):
    args = ["simulate", "--workload", "chat", "--policy", "fixed-256", "--tpot-slo", "25",
            "--rate", "20", "--seeds", "1", "--requests", "40", "--out", str(tmp_path),
            "--truth", "analytic:sigma=0.05,power_w=300", "--predictor", "oracle",
            "--drift", "1s:1.5", "--max-goodput", "--rate-range", "5:40:80", "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.stderr.count("warning: the predictor is the oracle") == 1
    doc = json.loads(result.stdout)
    assert doc["energy_per_good_request_j"] > 0
    # 40 short requests are all good at any load: the search says "above the cap"
    # rather than report the bracket's top as a maximum
    assert (doc["max_goodput"], doc["max_goodput_bound"]) == (80.0, "above_cap")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--policy", "nope"], "unknown policy 'nope'"),
        (["--workload", "nope"], "unknown workload"),
        (["--drift", "soon:1"], "--drift"),
        (["--truth", "magic"], "--truth"),
        (["--predictor", "missing.json"], "--predictor missing.json"),
        (["--tpot-slo", "-1"], "tpot_slo_ms must be > 0"),
    ],
)
def test_simulate_bad_input_is_one_line_exit_2(tmp_path, extra, message):
    base = {"--workload": "chat", "--policy": "full", "--tpot-slo": "25"}
    for flag, value in zip(extra[::2], extra[1::2], strict=True):
        base[flag] = value
    args = ["simulate", "--out", str(tmp_path / "x"), "--requests", "5"]
    for flag, value in base.items():
        args += [flag, value]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x").exists()


def test_compare_prints_rows_and_ratios(tmp_path):
    args = ["compare", "--workloads", "chat,long", "--policies", "fixed-256,sloweave",
            "--tpot-slo", "10,25", "--seeds", "1", "--requests", "40", "--jobs", "2",
            "--rates", "chat=20,long=5", "--out", str(tmp_path), "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert len(rows) == 8
    assert set(rows[0]) >= {"workload", "policy", "backend", "tpot_slo", "rate", "goodput",
                            "attainment", "p99_ttft_ms", "p99_tpot_ms", "recomputes"}  # fmt: skip
    saved = json.loads((tmp_path / "compare.json").read_text())
    assert len(saved["ratios"]) == 4 and {r["policy"] for r in saved["ratios"]} == {"sloweave"}
    assert {s["workload"]: s["rate"] for s in saved["specs"]} == {"chat": 20.0, "long": 5.0}
    assert (tmp_path / "long" / "sloweave" / "tpot-10" / "seed-0" / "run.json").is_file()


def test_compare_table_output_and_bad_rates(tmp_path):
    args = ["compare", "--workloads", "chat", "--policies", "full,sloweave", "--tpot-slo", "25",
            "--seeds", "1", "--requests", "20", "--jobs", "1", "--out", str(tmp_path)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "TPOT SLO 25 ms" in result.output and "best static" in result.output
    bad = runner.invoke(app, args + ["--rates", "chat=fast"])
    assert bad.exit_code == 2 and "--rates" in bad.output


def test_simulate_replays_a_trace_at_its_own_times(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("prompt_tokens,output_tokens,arrival_s\n100,10,0.0\n200,5,0.5\n50,3,1.0\n")
    args = ["simulate", "--workload", f"trace:{trace}", "--policy", "sloweave",
            "--tpot-slo", "25", "--seeds", "1", "--out", str(tmp_path / "o"), "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    req = pd.read_parquet(tmp_path / "o" / "seed-0" / "requests.parquet")
    assert list(req["arrival_ms"]) == [0.0, 500.0, 1000.0]
    assert json.loads(result.stdout)["attainment"] == 1.0


def test_compare_stops_on_a_bad_trace_with_one_line(tmp_path):
    trace = tmp_path / "bad.csv"
    trace.write_text("foo,bar\n1,2\n")
    args = ["compare", "--workloads", f"trace:{trace}", "--policies", "full", "--tpot-slo",
            "25", "--seeds", "2", "--jobs", "1", "--out", str(tmp_path / "o")]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and "Traceback" not in result.output


def test_simulate_device_truth_fitted_table_and_tenant_tiers(tmp_path):
    """The issue-16 pair end to end: a device truth, the fitted table, one row per tier."""
    base = ["simulate", "--workload", "tenants", "--policy", "sloweave", "--tpot-slo", "25",
            "--rate", "20", "--seeds", "1", "--requests", "80", "--truth", "device",
            "--predictor", "fitted"]  # fmt: skip
    result = runner.invoke(app, [*base, "--out", str(tmp_path / "a"), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert set(doc["by_tpot_slo"]) == {"10", "25", "50"}
    assert 0 < doc["online"]["p50_mape"] < 0.2  # a fitted table, not the truth itself
    result = runner.invoke(app, [*base, "--out", str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    for slo in ("10", "25", "50"):
        assert f"TPOT {slo} ms: attain / tpot / share" in result.stdout


def test_simulate_reports_predictions_beyond_the_tables_grid(tmp_path):
    """No silent clamp: a table whose chunk axis stops at 256 prices longer chunks at
    the edge; simulate records the count per axis in run.json and says so in a line."""
    from pathlib import Path

    from servecal.costmodels.table import AXES, CostTable

    full = CostTable.load(Path(__file__).parents[2] / "sched/data/device_a100_fitted.json")
    keep = [i for i, c in enumerate(full.axes["chunk"]) if c <= 256]
    values = {q: full.values(q)[..., keep] for q in full.quantiles}
    axes = {a: full.axes[a] for a in AXES} | {"chunk": [full.axes["chunk"][i] for i in keep]}
    small = CostTable(axes, values, margin=full.margin_info, fingerprint=full.fingerprint)
    small.save(tmp_path / "small.json")
    args = ["simulate", "--workload", "mixed", "--policy", "sloweave", "--tpot-slo", "50",
            "--rate", "20", "--seeds", "1", "--requests", "40", "--truth", "device",
            "--predictor", str(tmp_path / "small.json"), "--out", str(tmp_path / "o")]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    run = json.loads((tmp_path / "o" / "seed-0" / "run.json").read_text())
    beyond = run["summary"]["beyond_grid"]
    assert beyond["chunk"] > 0 and beyond["predictions"] >= beyond["chunk"]
    assert f"{beyond['predictions']:,} predictions beyond the table's grid (" in result.stdout
    assert "priced at the edge" in result.stdout
