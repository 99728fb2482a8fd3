"""A renamed flag keeps its old name as a hidden alias that warns once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.commands import _common
from servecal.commands._common import renamed_flag
from servecal.costmodels import InputError

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "samples_analytic.parquet"


def test_the_old_name_gives_the_value_and_warns_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_common, "_WARNED_ALIASES", set())
    assert renamed_flag("new", None, "--family", "--model") == "new"
    assert capsys.readouterr().err == ""
    assert renamed_flag(None, "linear", "--family", "--model") == "linear"
    assert renamed_flag(None, "table", "--family", "--model") == "table"
    assert capsys.readouterr().err == "note: --model is deprecated, use --family\n"
    assert renamed_flag("linear", "linear", "--family", "--model") == "linear"  # same value
    with pytest.raises(InputError, match="--model is the old name of --family"):
        renamed_flag("table", "linear", "--family", "--model")


def test_fit_takes_the_family_under_its_old_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_common, "_WARNED_ALIASES", set())  # not yet warned in this process
    out = tmp_path / "t.json"
    res = runner.invoke(app, ["fit", str(EXAMPLE), "--out", str(out), "--model", "piecewise",
                              "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout.strip().splitlines()[-1])["model"]["kind"] == "piecewise"
    assert "--model is deprecated, use --family" in res.stderr


def test_fit_refuses_two_different_families(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    res = runner.invoke(app, ["fit", str(EXAMPLE), "--out", str(out), "--model", "linear",
                              "--family", "piecewise"])  # fmt: skip
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        "error: --model is the old name of --family: give one of them"
    ]
    assert not out.exists()


def test_fit_takes_the_fold_share_under_its_old_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_common, "_WARNED_ALIASES", set())
    out = tmp_path / "t.json"
    res = runner.invoke(app, ["fit", str(EXAMPLE), "--out", str(out), "--family", "linear",
                              "--holdout", "0.5", "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout.strip().splitlines()[-1])["model"]["selection"]["folds"] == 2
    assert "--holdout is deprecated, use --fold-share" in res.stderr


@pytest.mark.parametrize(
    ("command", "old"), [("fit", "--model"), ("fit", "--holdout"), ("simulate", "--executor")]
)
def test_old_names_are_hidden_from_help(command: str, old: str) -> None:
    res = runner.invoke(app, [command, "--help"], terminal_width=200)
    assert res.exit_code == 0
    assert old not in res.stdout.replace("--model-", "")
