"""A truth written outside the project runs by import path (docs/plugins.md).

The truth is the example printed in docs/plugins.md, written to a folder put on
PYTHONPATH and run through the real ``servecal`` entry point, as a user would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from userplugins import docs_example, servecal

from servecal.costmodels import AnalyticPredictor


@pytest.fixture(scope="module")
def user_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    code = docs_example("A truth")
    assert "def executor" in code and "def slow_truth" in code
    folder = tmp_path_factory.mktemp("user")
    (folder / "slow_truth.py").write_text(code, encoding="utf-8")
    broken = code.replace("        return ms, None", "        return -ms, None")
    (folder / "broken_truth.py").write_text(broken, encoding="utf-8")
    return folder


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


#: A truth of the user's own with no drift code: docs/spec.md §1's noiseless formula,
#: written out as the built-in ``analytic`` truth computes it, with constant power.
FORMULA_TRUTH = """
from servecal.costmodels import AnalyticPredictor


class FormulaExecutor:
    energy_source = "model"

    def __init__(self, f):
        self.f = f

    def execute(self, n_decode, chunk, ctx, prefix, now_ms):
        f = self.f
        t = f.base
        if n_decode > 0:
            t += f.decode_fixed + f.decode_per_token * n_decode
        if chunk > 0:
            t += f.prefill_fixed + f.prefill_per_token * chunk
        return t, 300.0 * t / 1000.0


class FormulaTruth:
    def executor(self, rng):
        return FormulaExecutor(AnalyticPredictor())

    def oracle(self):
        return AnalyticPredictor()


def load(arg):
    return FormulaTruth()
"""


def test_a_user_truth_drifts_exactly_as_a_built_in_one(tmp_path: Path, monkeypatch) -> None:
    from servecal.sched.experiment import RunSpec, run
    from servecal.sched.policies.registry import PolicySpec

    (tmp_path / "formula_truth.py").write_text(FORMULA_TRUTH, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))

    def iterations(truth: str, drift: str | None) -> dict:
        spec = RunSpec("chat", PolicySpec("sloweave"), tpot_slo_ms=50, rate=8, n_requests=80,
                       truth=truth, predictor="oracle", drift=drift)  # fmt: skip
        return run(spec, 0).iteration_columns

    try:
        drift = "2s:1.5:c=1-100000"  # iterations with a prefill chunk, from 2 s on
        user = iterations("formula_truth:load", drift)
        built_in = iterations("analytic:power_w=300", drift)
    finally:
        sys.modules.pop("formula_truth", None)
    for name in ("start_ms", "duration_ms", "n_decode", "chunk"):
        assert np.array_equal(user[name], built_in[name]), name
    assert user["energy_j"] == pytest.approx(built_in["energy_j"], rel=1e-12)
    # each iteration took the formula's time, x 1.5 exactly where the drift covers it
    f = AnalyticPredictor()
    n, chunk, start = user["n_decode"], user["chunk"], user["start_ms"]
    formula = f.base + np.where(n > 0, f.decode_fixed + f.decode_per_token * n, 0.0)
    formula = formula + np.where(chunk > 0, f.prefill_fixed + f.prefill_per_token * chunk, 0.0)
    covered = (start >= 2000) & (chunk >= 1)
    assert covered.sum() > 20 and (~covered).sum() > 20
    assert np.allclose(user["duration_ms"], formula * np.where(covered, 1.5, 1.0), rtol=1e-12)
