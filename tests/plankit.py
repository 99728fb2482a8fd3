"""What the ``servecal plan`` tests build: a plan table's text, its run, and the
attainment of one of its configurations checked by a direct run.

Shared by tests/cli/test_plan.py, tests/cli/test_plan_disagg.py and
tests/test_audit_cases.py (``tests/`` is on ``sys.path``: tests/conftest.py). The text
is written out line for line as a user would (the tests edit it with ``str.replace``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import Result
from typer.testing import CliRunner

from servecal.cli import app
from servecal.sched.cluster.planner import Config, ReplicaSearch, cluster_spec
from servecal.sched.cluster.space import Space
from servecal.sched.experiment import run, summarize

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "sched" / "data" / "azure_conv_head4000.csv"

runner = CliRunner()


def plan_head(
    requests: int,
    rate: float,
    tpot_slo_ms: float,
    attainment: float,
    replicas: tuple[int, int],
    policies: list[str],
    routers: list[str],
) -> str:
    """A plan table's ``[workload]``, ``[target]`` and ``[search]`` on :data:`TRACE`."""
    return f"""
[workload]
trace = "{TRACE}"
requests = {requests}
rate = {rate}
tpot_slo_ms = {tpot_slo_ms}

[target]
attainment = {attainment}

[search]
replicas = [{replicas[0]}, {replicas[1]}]
policies = {json.dumps(policies)}
routers = {json.dumps(routers)}
"""


def device(name: str, price_per_gpu_hour: float, **tp: str) -> str:
    """One ``[[device]]`` with one TP-1 candidate; ``tp``: its other keys (``fleet``,
    ``truth``, ``predictor``), as TOML strings in the order given."""
    lines = "".join(f'{key} = "{value}"\n' for key, value in tp.items())
    return f"""
[[device]]
name = "{name}"
price_per_gpu_hour = {price_per_gpu_hour}
[[device.tp]]
size = 1
{lines}"""


def run_plan(tmp_path: Path, text: str, *args: str, name: str = "out") -> tuple[Result, Path]:
    """``servecal plan`` on ``text`` (written to ``tmp_path/plan.toml``), one job,
    into ``tmp_path/name``: the CLI's result and that folder."""
    path = tmp_path / "plan.toml"
    path.write_text(text)
    out = tmp_path / name
    result = runner.invoke(app, ["plan", str(path), "--out", str(out), "--jobs", "1", *args])
    return result, out


def attainment(space: Space, label: str, n: int) -> float:
    """The attainment of configuration ``label`` on ``n`` replicas (units), run directly."""
    [config] = [Config(0, h, p, r, ReplicaSearch(1, 1)) for h, p, r in space.configs
                if f"{h.name} · {p.label} · {r.label}" == label]  # fmt: skip
    spec = cluster_spec(space, config, n, space.rate)
    return summarize(spec, run(spec, 0))["attainment"]


def local_and_ray_plans(tmp_path: Path, text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``plan.json`` of ``text`` planned locally and on a Ray pool (``--no-frontier``);
    asserts both succeeded and the second says it ran on Ray."""
    local, out_local = run_plan(tmp_path, text, "--no-frontier", name="local")
    on_ray, out_ray = run_plan(tmp_path, text, "--no-frontier", "--pool", "ray", name="ray")
    assert local.exit_code == 0 and on_ray.exit_code == 0, on_ray.output
    a = json.loads((out_local / "plan.json").read_text())
    b = json.loads((out_ray / "plan.json").read_text())
    assert b["pool"] == "ray"
    return a, b
