"""A policy written outside the project runs by import path (docs/policies.md).

The policy is the example printed in docs/policies.md, written to a folder that is
put on PYTHONPATH, and run through the real ``servecal`` entry point (a separate
process), as a user would: ``simulate --policy mod:Class`` and
``compare --policies fixed-512,mod:Class``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[2] / "docs" / "policies.md"
NAME = "capped_chunk:CappedChunk"


@pytest.fixture(scope="module")
def user_path(tmp_path_factory) -> Path:
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## Your own policy, by import path", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "class CappedChunk" in code and "def plan" in code
    folder = tmp_path_factory.mktemp("user")
    (folder / "capped_chunk.py").write_text(code, encoding="utf-8")
    return folder


def servecal(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(folder)}
    return subprocess.run(
        [sys.executable, "-m", "servecal", *args], env=env, capture_output=True, text=True
    )


def test_simulate_runs_a_policy_loaded_by_import_path(user_path, tmp_path):
    out = tmp_path / "sim"
    res = servecal(user_path, "simulate", "--workload", "chat", "--policy", NAME, "--opt",
                   "chunk=256", "--tpot-slo", "25", "--rate", "20", "--seeds", "2",
                   "--requests", "60", "--out", str(out), "--json")  # fmt: skip
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["policy"] == f"{NAME}[chunk=256]" and doc["backend"] == "engine"
    assert doc["attainment"] > 0.5 and doc["iterations"] > 0
    run = json.loads((out / "seed-1" / "run.json").read_text())
    assert run["config"]["policy"] == NAME
    assert run["config"]["policy_options"] == {"chunk": 256, "quantile": 0.99}


def test_compare_runs_it_beside_a_built_in_policy(user_path, tmp_path):
    out = tmp_path / "cmp"
    res = servecal(user_path, "compare", "--workloads", "chat", "--policies",
                   f"fixed-512,{NAME}", "--tpot-slo", "25", "--rates", "chat=20", "--seeds",
                   "1", "--requests", "60", "--jobs", "2", "--out", str(out), "--json")  # fmt: skip
    assert res.returncode == 0, res.stderr
    rows = {r["policy"]: r for r in json.loads(res.stdout)}
    assert set(rows) == {"fixed-512", NAME}
    assert rows[NAME]["backend"] == "engine" and rows[NAME]["goodput"] > 0
    ratios = json.loads((out / "compare.json").read_text())["ratios"]
    assert [(r["policy"], r["best_baseline"]) for r in ratios] == [(NAME, "fixed-512")]


@pytest.mark.parametrize(
    ("policy", "extra", "message"),
    [
        ("capped_chunk:Nope", [], "has no 'Nope'"),
        ("nowhere:CappedChunk", [], "cannot import 'nowhere'"),
        (NAME, ["--opt", "chunk=big"], "chunk takes a whole number"),
        (NAME, ["--opt", "size=1"], "has no option 'size'"),
    ],
)
def test_a_bad_import_path_or_option_is_one_line(user_path, tmp_path, policy, extra, message):
    res = servecal(user_path, "simulate", "--workload", "chat", "--policy", policy, *extra,
                   "--tpot-slo", "25", "--requests", "5", "--out", str(tmp_path / "x"))  # fmt: skip
    assert res.returncode == 2
    assert res.stderr.startswith("error: ") and message in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
