"""servecal simulate / compare for the FlowPrefill study, and their one-line errors."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.sched.experiment import Bracket, RunSpec, run, summarize, sweep
from servecal.sched.policies import PolicySpec

runner = CliRunner()


def test_simulate_prefill_setting_prints_the_flowprefill_keys(tmp_path):
    out = tmp_path / "sim"
    args = ["simulate", "--workload", "multislo", "--policy", "flowprefill",
            "--setting", "prefill", "--rate", "90", "--seeds", "2", "--requests", "150",
            "--out", str(out), "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    for key in ("goodput", "attainment", "p99_ttft_ms", "wakeups", "parks", "parked_batches",
                "p99_blocking_ms", "max_operator_ms"):  # fmt: skip
        assert key in doc
    assert doc["p99_tpot_ms"] is None  # a prefill instance emits first tokens only
    assert doc["wakeups"] > 0 and doc["backend"] == "operator-driver"
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
        (["--policy", "sloweave"], "runs on the engine only"),
        (["--policy", "flowprefill", "--setting", "both"], "setting"),
        (["--policy", "flowprefill", "--granularity", "kernel"], "granularity"),
        (["--policy", "flowprefill", "--max-goodput", "--rate-range", "9:1"], "rate-range"),
        (["--policy", "flowprefill", "--rate-range", "1:9"], "apply with --max-goodput"),
        # the prefill setting judges TTFT only: a TPOT target is neither needed nor ignored
        (["--policy", "flowprefill", "--tpot-slo", "100"], "does not apply to --setting prefill"),
        (["--policy", "flowprefill", "--monitor"], "--monitor"),
        (["--policy", "flowprefill", "--device", "cpu"], "--device"),
    ],
)
def test_simulate_bad_flags_are_one_line_errors(tmp_path, extra, needle):
    args = ["simulate", "--workload", "multislo", "--setting", "prefill",
            "--requests", "20", "--seeds", "1", "--out", str(tmp_path / "o"), *extra]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and needle in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_engine_only_flags_are_refused_on_the_driver_and_vice_versa(tmp_path):
    args = ["simulate", "--workload", "chat", "--policy", "sloweave", "--tpot-slo", "25",
            "--rate", "10", "--requests", "20", "--seeds", "1", "--out", str(tmp_path / "o"),
            "--granularity", "fine"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "apply to the operator driver, not the engine" in result.output
    colocated = ["simulate", "--workload", "chat", "--policy", "flowprefill", "--rate", "10",
                 "--requests", "20", "--seeds", "1", "--out", str(tmp_path / "o")]  # fmt: skip
    result = runner.invoke(app, colocated)
    assert result.exit_code == 2 and "--tpot-slo is required" in result.output


def test_compare_reports_max_goodput_and_ratios(tmp_path):
    out = tmp_path / "cmp"
    args = ["compare", "--workloads", "multislo", "--policies", "flowprefill,fcfs",
            "--setting", "prefill", "--seeds", "1", "--requests", "60", "--max-goodput",
            "--rate-range", "20:300:1200", "--jobs", "1", "--out", str(out), "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = {r["policy"]: r for r in json.loads(result.stdout)}
    assert set(rows) == {"flowprefill", "fcfs"}
    assert rows["flowprefill"]["max_goodput"] >= rows["fcfs"]["max_goodput"] > 0
    assert rows["fcfs"]["max_goodput_bound"] == "measured"
    # 60 requests: FlowPrefill keeps 90% on time at any load (it gives up on the late
    # long ones), so its maximum is above the cap, and says so instead of naming the cap
    assert rows["flowprefill"]["max_goodput_bound"] == "above_cap"
    assert rows["flowprefill"]["max_goodput"] == 1200.0
    doc = json.loads((out / "compare.json").read_text())
    (ratio,) = doc["ratios"]
    assert ratio["policy"] == "flowprefill" and ratio["best_baseline"] == "fcfs"
    assert ratio["metric"] == "max_goodput" and ratio["ratio"] >= 1.0
    assert (out / "multislo" / "fcfs" / "tpot-none" / "seed-0" / "run.json").is_file()


def test_compare_without_a_driver_policy_refuses_driver_flags(tmp_path):
    args = ["compare", "--policies", "full", "--workloads", "chat", "--tpot-slo", "25",
            "--granularity", "fine", "--out", str(tmp_path)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "operator driver" in result.output


def test_max_goodput_matches_attainment_at_the_answer():
    spec = RunSpec("multislo", PolicySpec("fcfs"), rate=90.0, n_requests=80,
                   backend="operator-driver", setting="prefill")  # fmt: skip
    (outcome,) = sweep([spec], goodput=Bracket(10.0, 300.0), jobs=1)
    best = outcome.mean["max_goodput"]
    att = summarize(spec, run(spec.at_rate(best), 0))["attainment"]
    assert outcome.mean["max_goodput_bound"] == "measured" and best >= 10.0 and att >= 0.9
    above = summarize(spec, run(spec.at_rate(best * 1.05), 0))["attainment"]
    assert above < 0.9  # the next rate up was measured to miss: a maximum, not a bound
