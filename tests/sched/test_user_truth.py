"""A truth written outside the project runs by import path (docs/plugins.md).

The truth is the example printed in docs/plugins.md, written to a folder put on
PYTHONPATH and run through the real ``servecal`` entry point, as a user would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[2] / "docs" / "plugins.md"


@pytest.fixture(scope="module")
def user_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    section = DOCS.read_text(encoding="utf-8").split("## A truth\n", 1)[1].split("\n## ")[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "def executor" in code and "def slow_truth" in code
    folder = tmp_path_factory.mktemp("user")
    (folder / "slow_truth.py").write_text(code, encoding="utf-8")
    broken = code.replace("        return ms, None", "        return -ms, None")
    (folder / "broken_truth.py").write_text(broken, encoding="utf-8")
    return folder


def servecal(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(folder)}
    return subprocess.run(
        [sys.executable, "-m", "servecal", *args], env=env, capture_output=True, text=True
    )


def _simulate(folder: Path, out: Path, truth: str) -> subprocess.CompletedProcess:
    args = ["simulate", "--workload", "chat", "--policy", "fixed-256", "--tpot-slo", "50",
            "--rate", "5", "--seeds", "1", "--requests", "40", "--truth", truth,
            "--predictor", "oracle", "--out", str(out), "--json"]  # fmt: skip
    return servecal(folder, *args)


def test_a_truth_loads_by_import_path_with_its_argument(user_path: Path, tmp_path: Path) -> None:
    runs = {}
    for scale in ("1", "3"):
        res = _simulate(user_path, tmp_path / scale, f"slow_truth:slow_truth:{scale}")
        assert res.returncode == 0, res.stderr
        runs[scale] = json.loads(res.stdout)
        run = json.loads((tmp_path / scale / "seed-0" / "run.json").read_text())
        assert run["config"]["truth"] == f"slow_truth:slow_truth:{scale}"
    # the same requests and plans, each iteration 3x as slow: the truth really ran
    assert runs["3"]["mean_ttft_ms"] > 2.0 * runs["1"]["mean_ttft_ms"]


def test_a_loader_that_returns_no_truth_is_one_line(user_path: Path, tmp_path: Path) -> None:
    res = _simulate(user_path, tmp_path / "bad", "slow_truth:SlowExecutor")
    assert res.returncode == 2
    assert res.stderr.strip().startswith("error: ") and len(res.stderr.strip().splitlines()) == 1


def test_an_unknown_truth_names_the_choices(user_path: Path, tmp_path: Path) -> None:
    res = _simulate(user_path, tmp_path / "x", "nosuch")
    assert res.returncode == 2
    assert "or MODULE:ATTR" in res.stderr and "samples:PATH" in res.stderr


@pytest.mark.parametrize(
    ("truth", "says"),
    [
        ("broken_truth:slow_truth", "execute: returned a duration of -"),
        ("slow_truth:slow_truth:fast", "ValueError: could not convert string to float"),
    ],
)
def test_a_truth_that_fails_while_running_is_one_line(
    user_path: Path, tmp_path: Path, truth: str, says: str
) -> None:
    res = _simulate(user_path, tmp_path / "bad", truth)
    assert res.returncode == 2
    lines = [x for x in res.stderr.strip().splitlines() if not x.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith(f"error: --truth {truth}: "), lines
    assert says in lines[0]
