"""``calibrate --engine``: bad input is one line and exit 2 before any engine starts;
the OpenMP settings the engine's driver is started with (the real engine runs in
tests/integrations/test_vllm_calibrate.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.profiler import vllm_engine
from servecal.profiler.shapes import ModelShape
from servecal.profiler.vllm_engine import EngineOptions, served_omp_env, shape_of_folder

runner = CliRunner()


def _fails(args: list[str], match: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVECAL_VLLM_CPU_PYTHON", raising=False)
    monkeypatch.setattr(vllm_engine, "vllm_here", lambda: False)  # as where vLLM is not
    result = runner.invoke(app, ["calibrate", *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert match in lines[0]


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--engine", "sglang"], "expected servecal or vllm"),
        (["--engine", "vllm"], "--server-python"),
        (["--engine", "vllm", "--server-python", "/no/such/python"], "no such executable"),
        (["--server-python", sys.executable], "need --engine vllm"),
        (["--model-dir", "."], "need --engine vllm"),
        (["--nice", "-5"], "need --engine vllm"),
        (["--kv-block-size", "32"], "need --engine vllm"),
        (["--engine", "vllm", "--server-python", sys.executable, "--nice", "40"],
         "expected -20..19"),
        (["--engine", "vllm", "--server-python", sys.executable, "--layers", "2"],
         "do not apply"),
        (["--engine", "vllm", "--server-python", sys.executable, "--device", "tpu"],
         "expected auto, cpu or cuda:N"),
    ],
)  # fmt: skip
def test_bad_engine_options_are_one_line(
    args: list[str], match: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fails([*args, "--out", str(tmp_path / "cal")], match, monkeypatch)
    assert not (tmp_path / "cal" / "shards").exists()  # nothing half-written


def test_the_driver_runs_in_this_python_when_it_has_vllm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--server-python, else $SERVECAL_VLLM_CPU_PYTHON, else this Python if it has vLLM."""
    monkeypatch.delenv("SERVECAL_VLLM_CPU_PYTHON", raising=False)
    monkeypatch.setattr(vllm_engine, "vllm_here", lambda: True)
    assert vllm_engine._python(EngineOptions()) == sys.executable
    monkeypatch.setenv("SERVECAL_VLLM_CPU_PYTHON", "sh")
    assert vllm_engine._python(EngineOptions()).endswith("/sh")
    assert vllm_engine._python(EngineOptions(server_python="true")).endswith("/true")


def test_a_model_dir_without_config_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["--engine", "vllm", "--server-python", sys.executable, "--model-dir",
            str(tmp_path), "--out", str(tmp_path / "cal")]  # fmt: skip
    _fails(args, "no config.json", monkeypatch)


def test_resume_of_a_servecal_run_with_engine_vllm_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shards = tmp_path / "cal" / "shards"
    shards.mkdir(parents=True)
    from servecal.profiler.shards import PLAN_KEYS, PLAN_SCHEMA

    # a whole servecal plan (every key a resume reads), but no "engine": "vllm"
    plan = {k: 0 for k in PLAN_KEYS} | {"schema": PLAN_SCHEMA, "shape": {}, "points": []}
    (shards / "plan.json").write_text(json.dumps(plan))
    args = ["--engine", "vllm", "--server-python", sys.executable, "--resume",
            "--out", str(tmp_path / "cal")]  # fmt: skip
    _fails(args, "not started with --engine vllm", monkeypatch)


def test_a_model_folder_reads_as_its_shape(tmp_path: Path) -> None:
    from servecal.profiler.model_folder import write_model_folder

    folder = write_model_folder("tiny", tmp_path / "m")
    shape, tiny = shape_of_folder(folder), ModelShape.resolve("tiny")
    assert {k: v for k, v in shape.to_dict().items() if k != "name"} == {
        k: v for k, v in tiny.to_dict().items() if k != "name"
    }


@pytest.mark.parametrize(
    ("name", "architecture", "shared"),
    [("tiny-moe", "Qwen2MoeForCausalLM", 1), ("tiny-moe-noshared", "Qwen3MoeForCausalLM", 0)],
)
def test_a_moe_shape_becomes_a_qwen_moe_folder_that_reads_back_as_itself(
    name: str, architecture: str, shared: int, tmp_path: Path
) -> None:
    """The folder vLLM serves for a MoE shape carries its experts, top-k and widths,
    and ``--model-dir`` on it reads the same shape back (so the fingerprint and the
    plug-in's model check agree with what was served)."""
    from servecal.profiler.model_folder import write_model_folder

    moe = ModelShape.resolve("tiny-moe").to_dict() | {"name": name, "shared_experts": shared}
    spec = tmp_path / f"{name}.json"
    spec.write_text(json.dumps(moe))
    folder = write_model_folder(str(spec), tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == [architecture]
    assert (config["num_experts"], config["num_experts_per_tok"]) == (8, 2)
    assert config["moe_intermediate_size"] == 192 and config["intermediate_size"] == 384
    back = shape_of_folder(folder)
    assert {k: v for k, v in back.to_dict().items() if k != "name"} == {
        k: v for k, v in moe.items() if k != "name"
    }
    assert back.moe_label == f"E8 top-2 ffn 192{' shared 1' if shared else ''} EP 1"


@pytest.mark.parametrize(
    ("extra", "match"), [({"ep": 2}, "ep 2 needs"), ({"routing_skew": 0.5}, "routing_skew 0.5")]
)
def test_a_moe_shape_vllm_cannot_serve_on_one_device_is_refused(
    extra: dict, match: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "moe.json"
    spec.write_text(json.dumps(ModelShape.resolve("tiny-moe").to_dict() | extra))
    args = ["--engine", "vllm", "--server-python", sys.executable, "--model", str(spec),
            "--out", str(tmp_path / "cal")]  # fmt: skip
    _fails(args, match, monkeypatch)
    assert not (tmp_path / "cal" / "shards").exists()


def test_the_driver_gets_the_served_workers_openmp_binding() -> None:
    env = served_omp_env(None, {})
    threads = int(env["OMP_NUM_THREADS"])
    places = env["OMP_PLACES"].strip("{}").split(",")
    assert threads == len(places) >= 1 and env["OMP_PROC_BIND"] == "true"
    assert served_omp_env(None, {"OMP_NUM_THREADS": "3"}) == {}  # the user's own wins
    assert served_omp_env(2, {"OMP_NUM_THREADS": "3"})["OMP_NUM_THREADS"] == "2"
