"""servecal simulate / compare for the FlowPrefill study, and their one-line errors."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.sched.flowprefill import FlowConfig, max_goodput_of, run_seed, summarize_flow

runner = CliRunner()


def test_simulate_prefill_setting_prints_the_flowprefill_keys(tmp_path):
    out = tmp_path / "sim"
    args = ["simulate", "--workload", "multislo", "--policy", "flowprefill", "--tpot-slo",
            "100", "--setting", "prefill", "--rate", "90", "--seeds", "2", "--requests", "150",
            "--out", str(out), "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    for key in ("goodput", "attainment", "p99_ttft_ms", "wakeups", "parks", "parked_batches",
                "p99_blocking_ms", "max_operator_ms"):  # fmt: skip
        assert key in doc
    assert doc["p99_tpot_ms"] is None  # a prefill instance emits first tokens only
    assert doc["wakeups"] > 0
    req = pd.read_parquet(out / "seed-0" / "requests.parquet")
    assert set(req["slo_class"]) <= {"text", "image", "search", "file"}
    assert (req["tokens_out"] == 1).all()
    run = json.loads((out / "seed-1" / "run.json").read_text())
    assert run["config"]["setting"] == "prefill" and run["summary"]["wakeups"] > 0


def test_simulate_trace_with_slo_classes_colocated(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(
        "prompt_tokens,output_tokens,arrival_s\n"
        + "".join(f"{100 + 37 * i},{3 + i % 5},{0.02 * i}\n" for i in range(40))
    )
    args = ["simulate", "--workload", f"trace:{trace}", "--slo-classes", "multislo",
            "--policy", "flowprefill", "--setting", "colocated", "--tpot-slo", "50",
            "--seeds", "1", "--out", str(tmp_path / "o"), "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    req = pd.read_parquet(tmp_path / "o" / "seed-0" / "requests.parquet")
    assert list(req["arrival_ms"][:3]) == pytest.approx([0.0, 20.0, 40.0])  # its own times
    assert (req["tokens_out"] == req["output_tokens"]).all()
    assert json.loads(result.stdout)["p99_tpot_ms"] is not None


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--policy", "nope"], "unknown policy"),
        (["--policy", "sloweave", "--setting", "prefill"], "colocated"),
        (["--policy", "flowprefill", "--setting", "both"], "setting"),
        (["--policy", "flowprefill", "--granularity", "kernel"], "granularity"),
        (["--policy", "flowprefill", "--max-goodput", "--rate-range", "9:1"], "rate-range"),
    ],
)
def test_simulate_bad_flags_are_one_line_errors(tmp_path, extra, needle):
    args = ["simulate", "--workload", "multislo", "--tpot-slo", "100", "--setting", "prefill",
            "--requests", "20", "--seeds", "1", "--out", str(tmp_path / "o"), *extra]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and needle in result.output
    assert "Traceback" not in result.output


def test_compare_reports_max_goodput_and_ratios(tmp_path):
    out = tmp_path / "cmp"
    args = ["compare", "--workloads", "multislo", "--policies", "flowprefill,fcfs",
            "--setting", "prefill", "--seeds", "1", "--requests", "60", "--max-goodput",
            "--rate-range", "20:300", "--jobs", "1", "--out", str(out), "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = {r["policy"]: r for r in json.loads(result.stdout)}
    assert set(rows) == {"flowprefill", "fcfs"}
    assert rows["flowprefill"]["max_goodput"] >= rows["fcfs"]["max_goodput"] > 0
    doc = json.loads((out / "compare.json").read_text())
    assert doc["ratios"][0]["baseline"] == "fcfs" and doc["ratios"][0]["ratio"] >= 1.0
    assert (out / "fcfs" / "seed-0" / "run.json").is_file()


def test_compare_needs_one_workload(tmp_path):
    args = ["compare", "--workloads", "multislo,chat", "--policies", "flowprefill",
            "--setting", "prefill", "--out", str(tmp_path / "o")]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "one workload" in result.output
    engine_only = ["compare", "--policies", "full", "--max-goodput", "--out", str(tmp_path)]
    result = runner.invoke(app, engine_only)
    assert result.exit_code == 2 and "--setting" in result.output


def test_max_goodput_matches_attainment_at_the_answer():
    config = FlowConfig(policy="fcfs", n_requests=80, seeds=(0,))
    best = max_goodput_of(config, (10.0, 300.0))
    att = summarize_flow(config, run_seed(config, 0, best))["attainment"]
    assert 10.0 <= best < 300.0 and att >= 0.9
