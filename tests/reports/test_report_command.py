"""``servecal report``: writes both files; bad input is one line and exit code 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from reportkit import write_run
from typer.testing import CliRunner

from servecal.cli import app

runner = CliRunner()


def test_report_command_writes_html_and_markdown(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    write_run(tmp_path / "runs" / "a", rng, "fixed-1024", "chat", 50.0, 0)
    write_run(tmp_path / "runs" / "b", rng, "sloweave", "chat", 50.0, 0, drift=True)
    result = runner.invoke(app, ["report", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "report.html").stat().st_size > 10_000
    assert (tmp_path / "out" / "report.md").is_file()
    assert "report.html" in result.output


def test_report_command_bad_path_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", str(tmp_path / "nope"), "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "error:" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "report.html").exists()
