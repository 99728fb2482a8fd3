"""Whatever a user's policy (``--policy MODULE:CLASS``) does wrong is one line
``error: policy MOD:CLASS: METHOD: ...`` and exit 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servecal.cli import app

runner = CliRunner()

POLICIES = '''
from servecal.sched.plan import DECODE_ONLY, Plan
from servecal.sched.policies import room_for


class _Prefill:
    """Plans one prefill chunk of ``tokens(limit)`` for the next prompt."""

    def tokens(self, limit):
        return limit

    def plan(self, view, predictor):
        live = view.next_prefill()
        limit = 0 if live is None else min(64, room_for(view, live))
        if limit <= 0:
            return DECODE_ONLY
        return Plan(prefill=((live.rid, self.tokens(limit)),))


class ReturnsNone:
    def plan(self, view, predictor):
        return None


class ReturnsDict:
    def plan(self, view, predictor):
        return {"prefill": ()}


class ReturnsTuple:
    def plan(self, view, predictor):
        return ((), ())


class ReturnsInt:
    def plan(self, view, predictor):
        return 3


class FloatTokens(_Prefill):
    def tokens(self, limit):
        return limit - 0.5


class StrTokens(_Prefill):
    def tokens(self, limit):
        return str(limit)


class PlanRaises:
    def plan(self, view, predictor):
        return 1 / 0


class DecideRaises:
    preemptive = False

    def decide(self, view, predictor):
        raise LookupError("no such request")


class ObserveRaises(_Prefill):
    def observe(self, record):
        raise RuntimeError("observer broke")


class InitTypeError(_Prefill):
    def __init__(self):
        raise TypeError("bad setup")


class InitRuntimeError(InitTypeError):
    def __init__(self):
        raise RuntimeError("no GPU here")


class InitExits(InitTypeError):
    def __init__(self):
        raise SystemExit(3)


class SummaryNotJson(_Prefill):
    def observe(self, record):
        return None

    def summary(self):
        return {"when": object()}
'''


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("userpol")
    (where / "badpolicies.py").write_text(POLICIES)
    (where / "syntaxbroken.py").write_text("class Broken(:\n    pass\n")
    (where / "raisesatimport.py").write_text("raise RuntimeError('no config file')\n")
    (where / "exitsatimport.py").write_text("import sys\nsys.exit(0)\n")
    return where


@pytest.fixture
def on_path(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(folder))
    for name in ("badpolicies", "syntaxbroken", "raisesatimport", "exitsatimport"):
        sys.modules.pop(name, None)
    return folder


def simulate(out: Path, policy: str, *extra: str):
    target = [] if "prefill" in extra else ["--tpot-slo", "50"]
    args = ["simulate", "--workload", "chat", "--policy", policy, *target,
            "--seeds", "1", "--requests", "20", "--out", str(out), *extra]  # fmt: skip
    return runner.invoke(app, args)


def the_line(result, policy: str, method: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"error: policy {policy}: {method}: "), lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("cls", "method", "says"),
    [
        ("ReturnsNone", "plan", "returned NoneType, expected a Plan"),
        ("ReturnsDict", "plan", "returned dict, expected a Plan"),
        ("ReturnsTuple", "plan", "returned tuple, expected a Plan"),
        ("ReturnsInt", "plan", "returned int, expected a Plan"),
        ("FloatTokens", "plan", "whole numbers"),
        ("StrTokens", "plan", "whole numbers"),
        ("PlanRaises", "plan", "ZeroDivisionError: division by zero"),
        ("ObserveRaises", "observe", "RuntimeError: observer broke"),
        ("InitTypeError", "__init__", "TypeError: bad setup"),
        ("InitRuntimeError", "__init__", "RuntimeError: no GPU here"),
        ("InitExits", "__init__", "called exit(3)"),
        ("SummaryNotJson", "summary", "JSON cannot hold"),
    ],
)
def test_an_engine_policy_failure_is_one_line(on_path, tmp_path, cls, method, says) -> None:
    policy = f"badpolicies:{cls}"
    line = the_line(simulate(tmp_path / "o", policy), policy, method)
    assert says in line
    assert not list((tmp_path / "o").glob("seed-*"))  # no half-written run


def test_a_driver_policy_failure_is_one_line(on_path, tmp_path) -> None:
    policy = "badpolicies:DecideRaises"
    r = simulate(tmp_path / "o", policy, "--setting", "prefill")
    assert "LookupError: no such request" in the_line(r, policy, "decide")


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ("syntaxbroken:Broken", "SyntaxError"),
        ("raisesatimport:Any", "RuntimeError: no config file"),
        ("exitsatimport:Any", "called exit(0)"),
        ("../../etc:passwd", "import"),
        ("badpolicies:Nope", "has no 'Nope'"),
        ("servecal_no_such_module_27:X", "cannot import"),
    ],
)
def test_a_module_that_does_not_import_is_one_line(on_path, tmp_path, policy, says) -> None:
    assert says in the_line(simulate(tmp_path / "o", policy), policy, "import")


def test_exit_at_import_is_exit_2_from_the_shell(folder: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(folder)}
    args = ["simulate", "--workload", "chat", "--policy", "exitsatimport:Any", "--tpot-slo",
            "50", "--seeds", "1", "--requests", "10", "--out", str(tmp_path / "o")]  # fmt: skip
    r = subprocess.run(
        [sys.executable, "-m", "servecal", *args], env=env, capture_output=True, text=True
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.strip() == "error: policy exitsatimport:Any: import: called exit(0)"


def test_a_failure_in_a_worker_process_is_one_line(on_path, tmp_path) -> None:
    env_path = os.pathsep.join([str(on_path), os.environ.get("PYTHONPATH", "")])
    os.environ["PYTHONPATH"] = env_path  # the pool's workers import the module too
    try:
        r = runner.invoke(
            app,
            ["compare", "--workloads", "chat", "--policies", "fixed-256,badpolicies:PlanRaises",
             "--tpot-slo", "50", "--seeds", "2", "--requests", "20", "--jobs", "2",
             "--out", str(tmp_path / "c")],
        )  # fmt: skip
    finally:
        os.environ["PYTHONPATH"] = env_path.split(os.pathsep, 1)[1]
    the_line(r, "badpolicies:PlanRaises", "plan")


def test_the_docs_policy_still_runs(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        from servecal.sched.plan import DECODE_ONLY, Plan
        from servecal.sched.policies import room_for

        class Fine:
            def plan(self, view, predictor):
                live = view.next_prefill()
                limit = 0 if live is None else min(64, room_for(view, live))
                return Plan(prefill=((live.rid, limit),)) if limit > 0 else DECODE_ONLY

            def summary(self):
                return {"fine": True}
        """
    )
    (tmp_path / "finepolicy.py").write_text(code)
    sys.path.insert(0, str(tmp_path))
    try:
        r = simulate(tmp_path / "o", "finepolicy:Fine", "--json")
    finally:
        sys.path.remove(str(tmp_path))
    assert r.exit_code == 0, r.output
