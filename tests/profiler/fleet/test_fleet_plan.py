"""Fleet plans: matrices, defaults, names, one-line errors; fingerprints against the plan."""

from __future__ import annotations

import json

import pytest
from fleetkit import GRID, write_plan

from servecal.profiler.fleet import fingerprint_mismatches, load_plan, resources_for
from servecal.profiler.jobs import Resources
from servecal.profiler.shapes import ModelShape
from servecal.util.errors import InputError

IMPORT = {"kind": "import", "source": "vidur", "device": "A100", "model": "llama-3-8b"}
MATRIX = """
[defaults]
budget = 1800
grid = "grid.json"

[[matrix]]
device = ["H100", "A100"]
model = ["llama-3-8b", "qwen2.5-14b", "llama-3-70b"]
tp = [1, 2, 4]
"""


def test_matrix_expands_to_named_jobs_with_defaults(tmp_path):
    (tmp_path / "grid.json").write_text(json.dumps(GRID))
    path = tmp_path / "plan.toml"
    path.write_text(MATRIX)
    plan = load_plan(path)
    assert len(plan.jobs) == 18
    assert len({j.name for j in plan.jobs}) == 18
    job = plan.job("h100-llama-3-70b-tp4")
    assert (job.device, job.model, job.tp, job.budget) == ("H100", "llama-3-70b", 4, 1800.0)
    assert job.grid == GRID  # the file was read on the driver and travels with the job
    assert job.accelerator_type == "H100"
    assert job.shape == ModelShape.resolve("llama-3-70b").to_dict()


def test_resources_gpu_jobs_hold_tp_gpus_and_cpu_jobs_the_whole_node(tmp_path):
    plan = load_plan(
        write_plan(
            tmp_path,
            [
                {"device": "A100", "model": "llama-3-8b", "tp": 2},
                {"device": "cpu", "model": "tiny"},
                {"device": "cpu", "model": "tiny", "name": "small", "cpus": 1},
                {"device": "gpu", "model": "tiny", "name": "any"},
            ],
        )
    )
    node = Resources(num_cpus=16, num_gpus=8)
    assert resources_for(plan.jobs[0], node) == Resources(1.0, 2, "A100")
    assert resources_for(plan.jobs[1], node) == Resources(16.0, 0)
    assert resources_for(plan.jobs[2], node) == Resources(1.0, 0)
    assert resources_for(plan.jobs[3], node) == Resources(1.0, 1, None)


def test_identity_ignores_budget_but_not_the_grid(tmp_path):
    a = load_plan(write_plan(tmp_path, [{"device": "cpu", "model": "tiny"}])).jobs[0]
    b = load_plan(write_plan(tmp_path, [{"device": "cpu", "model": "tiny", "budget": 5}])).jobs[0]
    grid = {**GRID, "ctx": [16, 32]}
    c = load_plan(write_plan(tmp_path, [{"device": "cpu", "model": "tiny", "grid": grid}])).jobs[0]
    assert a.identity_hash == b.identity_hash
    assert a.identity_hash != c.identity_hash


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ({"device": "cpu", "model": "tiny", "budgett": 3}, "unknown key 'budgett'"),
        ({"model": "tiny"}, "device is required"),
        ({"device": "cpu", "model": "gpt-9"}, "unknown model shape 'gpt-9'"),
        ({"device": "cpu", "model": "tiny", "tp": 0}, "tp must be an integer >= 1"),
        ({"device": "cpu", "model": "tiny", "dtype": "fp8"}, "dtype must be one of"),
        ({"device": "cpu", "model": "tiny", "grid": {"chunk": [1]}}, "grid needs exactly"),
        ({"device": "cpu", "model": "tiny", "name": "a/b"}, "name 'a/b'"),
        (IMPORT | {"path": "nowhere"}, "no such file or folder"),
        (IMPORT | {"path": ".", "repeats": 3}, "unknown key 'repeats' for an import job"),
    ],
)
def test_bad_jobs_are_one_line_errors_naming_the_job(tmp_path, job, message):
    path = write_plan(tmp_path, [{"device": "cpu", "model": "tiny"}, job])
    with pytest.raises(InputError) as err:
        load_plan(path)
    text = str(err.value)
    assert message in text and "[[job]] 2" in text and "\n" not in text


def test_duplicate_names_and_empty_plans_are_refused(tmp_path):
    job = {"device": "cpu", "model": "tiny"}
    with pytest.raises(InputError, match="used twice"):
        load_plan(write_plan(tmp_path, [job, job]))
    empty = tmp_path / "empty.toml"
    empty.write_text("[defaults]\nbudget = 3\n")
    with pytest.raises(InputError, match="no job"):
        load_plan(empty)


def fingerprint(**over):
    shape = ModelShape.resolve("llama-3-8b")
    base = {
        "device": "cuda:0",
        "device_name": "NVIDIA H100 80GB HBM3",
        "model": shape.name,
        "model_hash": shape.hash,
        "dtype": "bfloat16",
        "kv_layout": "contiguous",
    }
    return {**base, **over}


def test_fingerprint_mismatches_name_each_disagreement(tmp_path):
    spec = load_plan(
        write_plan(tmp_path, [{"device": "H100", "model": "llama-3-8b", "dtype": "bfloat16"}])
    ).jobs[0]
    assert fingerprint_mismatches(spec, fingerprint()) == []
    wrong = fingerprint(
        device_name="NVIDIA A100-SXM4-80GB", model_hash="0" * 16, tp=2, dtype="float16"
    )
    found = fingerprint_mismatches(spec, wrong)
    assert [f.split(":")[0] for f in found] == ["device", "model", "tp", "dtype"]
    assert "planned H100, ran on NVIDIA A100-SXM4-80GB" in found[0]
