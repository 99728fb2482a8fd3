"""The small end-to-end version: calibrate tiny, then SLOWeave and fixed-1024 on chat for real."""

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.commands import _common
from servecal.costmodels import CostTable
from servecal.sched.torch_executor.targets import derive_targets

GRID = {"n_decode": [0, 2, 8], "chunk": [0, 32, 256], "ctx": [32, 256], "prefix": [0, 128]}


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    root = tmp_path_factory.mktemp("cal")
    (root / "grid.json").write_text(json.dumps(GRID))
    cal = root / "cal"
    res = CliRunner().invoke(
        app,
        ["calibrate", "--device", "cpu", "--model", "tiny", "--grid", str(root / "grid.json"),
         "--repeats", "9", "--threads", "1", "--no-fit", "--kv-layout", "paged",
         "--out", str(cal)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    # half the 24 points held out: 108 rows certify the P99 margin (the default needs more)
    fit = ["fit", str(cal / "samples.parquet"), "--fold-share", "0.5", "--out", str(cal / "t.json")]
    res = CliRunner().invoke(app, fit)
    assert res.exit_code == 0, res.output
    return cal / "t.json"


def _simulate(table, out, policy, *extra):
    targets = derive_targets(CostTable.load(table))
    args = ["simulate", "--workload", "chat", "--policy", policy, "--requests", "4",
            "--seeds", "1", "--rate", f"{targets.rate:.4g}", "--tpot-slo",
            f"{targets.tpot_slo_ms:.4g}", "--kv-tokens", "4096", "--predictor", str(table),
            "--backend", "torch", "--device", "cpu", "--out", str(out), *extra]  # fmt: skip
    return CliRunner().invoke(app, args)


@pytest.mark.parametrize("policy", ["sloweave", "fixed-1024"])
def test_a_torch_run_validates_the_calibrated_table_online(table, tmp_path, policy):
    res = _simulate(table, tmp_path / "run", policy, "--json")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    online = summary["online"]
    assert 0.0 <= online["p99_coverage"] <= 1.0 and online["p50_mape"] >= 0.0
    doc = json.loads((tmp_path / "run" / "seed-0" / "run.json").read_text())
    assert doc["config"]["backend"] == "torch"
    assert doc["observers"]["TorchExecutor"]["setup"]["model"] == "tiny"
    live = doc["observers"]["OnlineValidation"]
    assert live["p99_coverage"] == pytest.approx(doc["summary"]["online"]["p99_coverage"])
    assert live["p50_mape"] == pytest.approx(doc["summary"]["online"]["p50_mape"])
    assert "DriftMonitor" in doc["observers"]  # fed by the real measurements
    ex = doc["observers"]["TorchExecutor"]
    assert ex["kv_blocks_in_use_at_end"] == 0 and 0 < ex["kv_peak_tokens"] <= 4096
    iters = pd.read_parquet(tmp_path / "run" / "seed-0" / "iterations.parquet")
    assert {"covered", "p50_ape", "drift_state"} <= set(iters.columns)
    assert iters["covered"].mean() == pytest.approx(live["p99_coverage"])
    reqs = pd.read_parquet(tmp_path / "run" / "seed-0" / "requests.parquet")
    assert (reqs["tokens_out"] == reqs["output_tokens"]).all()
    assert ex["tokens_generated"] == reqs["tokens_out"].sum()


def test_adaptive_margins_plan_a_real_run(table, tmp_path):
    res = _simulate(table, tmp_path / "run", "sloweave", "--adaptive-margin", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "run" / "seed-0" / "run.json").read_text())
    assert doc["config"]["adaptive_margin"] is True
    assert "DriftMonitor" in doc["observers"]


def test_a_table_from_another_model_is_refused_or_used_with_a_warning(table, tmp_path):
    res = _simulate(table, tmp_path / "run", "sloweave", "--model", "tests/none.json")
    assert res.exit_code == 2 and res.output.startswith("error:")
    shape = {"n_layers": 2, "hidden": 64, "n_heads": 2, "n_kv_heads": 1, "head_dim": 32,
             "intermediate": 128, "vocab": 512}  # fmt: skip
    (tmp_path / "small.json").write_text(json.dumps(shape))
    res = _simulate(table, tmp_path / "run", "sloweave", "--model", str(tmp_path / "small.json"))
    assert res.exit_code == 2 and "fingerprint mismatch" in res.output, res.output
    res = _simulate(table, tmp_path / "run", "sloweave", "--model", str(tmp_path / "small.json"),
                    "--allow-mismatch")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "fingerprint mismatch" in res.stderr and "model" in res.stderr


def test_a_table_of_the_contiguous_layout_is_used_with_a_warning(table, tmp_path):
    doc = json.loads(table.read_text())
    assert doc["fingerprint"]["kv_layout"] == "paged"
    doc["fingerprint"]["kv_layout"] = "contiguous"
    other = tmp_path / "contiguous.json"
    CostTable.from_json(doc, allow_edited=True).save(other)  # written anew: its own hash
    res = _simulate(other, tmp_path / "run", "sloweave")
    assert res.exit_code == 0, res.output
    assert "contiguous KV layout" in res.stderr and "--kv-layout paged" in res.stderr
    res = _simulate(table, tmp_path / "run2", "sloweave")
    assert res.exit_code == 0 and "KV layout" not in res.stderr


@pytest.mark.parametrize(
    ("extra", "message"),
    [(("--max-goodput",), "max-goodput"), (("--drift", "1s:1.2"), "--drift")],
)
def test_torch_only_options_fail_as_one_line(table, tmp_path, extra, message):
    res = _simulate(table, tmp_path / "run", "sloweave", *extra)
    assert res.exit_code == 2
    assert res.stderr.startswith("error:") and message in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_the_oracle_cannot_drive_a_real_run(tmp_path):
    res = CliRunner().invoke(
        app,
        ["simulate", "--workload", "chat", "--policy", "sloweave", "--tpot-slo", "50",
         "--requests", "2", "--seeds", "1", "--backend", "torch", "--out", str(tmp_path)],
    )  # fmt: skip
    assert res.exit_code == 2 and "needs --predictor" in res.stderr


def test_unknown_backend_is_refused(tmp_path):
    res = CliRunner().invoke(
        app,
        ["simulate", "--workload", "chat", "--policy", "sloweave", "--tpot-slo", "50",
         "--requests", "2", "--seeds", "1", "--backend", "gpu", "--out", str(tmp_path)],
    )  # fmt: skip
    assert res.exit_code == 2 and "gpu" in res.stderr


def test_targets_scale_with_the_devices_costs(table):
    t = derive_targets(CostTable.load(table))
    assert t.tpot_slo_ms == pytest.approx(25.0 * t.decode_ms / t.decode_ms_paper)
    assert t.rate == pytest.approx(60.0 * t.request_ms_paper / t.request_ms)
    assert t.tpot_slo_ms > 0 and t.rate > 0


def test_the_old_executor_flag_still_runs_the_torch_backend(table, tmp_path, monkeypatch):
    monkeypatch.setattr(_common, "_WARNED_ALIASES", set())  # not yet warned in this process
    targets = derive_targets(CostTable.load(table))
    args = ["simulate", "--workload", "chat", "--policy", "fixed-1024", "--requests", "2",
            "--seeds", "1", "--rate", f"{targets.rate:.4g}", "--tpot-slo",
            f"{targets.tpot_slo_ms:.4g}", "--kv-tokens", "4096", "--predictor", str(table),
            "--executor", "torch", "--device", "cpu", "--out", str(tmp_path / "run")]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert res.stderr.count("--executor is deprecated, use --backend") == 1
    doc = json.loads((tmp_path / "run" / "seed-0" / "run.json").read_text())
    assert doc["config"]["backend"] == "torch"
