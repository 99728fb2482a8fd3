"""`servecal simulate` wiring of the drift monitor, adaptive margins and Sorted-F-Online."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from servecal.cli import app

runner = CliRunner()
BASE = ["simulate", "--workload", "mixed", "--tpot-slo", "25", "--rate", "30", "--seeds", "1"]


def _run(tmp_path: Path, *extra: str) -> dict:
    result = runner.invoke(app, [*BASE, "--requests", "150", "--out", str(tmp_path), *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_adaptive_margin_run_records_the_monitor_verdict(tmp_path: Path) -> None:
    _run(tmp_path, "--policy", "sloweave", "--drift", "1s:1.5", "--adaptive-margin", "--json")
    run = json.loads((tmp_path / "seed-0" / "run.json").read_text())
    assert run["config"]["adaptive_margin"] is True
    text = json.dumps(run)
    assert '"drift"' in text and "DriftMonitor" in text
    # a 50% slow-down from t=1 s is far above the noise: the monitor must leave "ok"
    assert '"state": "drift"' in text or '"state": "warn"' in text


def test_sorted_f_online_is_selectable_by_name(tmp_path: Path) -> None:
    summary = _run(tmp_path, "--policy", "sorted-f-online", "--json")
    assert summary["iterations"] > 0 and 0.0 <= summary["attainment"] <= 1.0
