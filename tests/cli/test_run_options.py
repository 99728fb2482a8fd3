"""``simulate`` and ``compare`` take their shared run options from one definition
(``RunOptions``), and the study ``compare`` runs is built by the experiment layer."""

from __future__ import annotations

import inspect
from dataclasses import fields
from pathlib import Path

import pytest

from servecal.commands._run_options import RunOptions, with_run_options
from servecal.commands.compare import compare_command
from servecal.commands.simulate import simulate_command
from servecal.sched import experiment as ex
from servecal.sched.policies.registry import PolicySpec
from servecal.util.errors import InputError


def test_both_commands_take_every_run_option_once() -> None:
    shared = [f.name for f in fields(RunOptions)]
    for command in (simulate_command, compare_command):
        params = inspect.signature(command).parameters
        assert "run" not in params
        assert all(list(params).count(name) == 1 for name in shared), command.__name__
        for name in shared:  # the very same option object: one definition
            option = next(f for f in fields(RunOptions) if f.name == name).metadata["option"]
            assert params[name].default is option


def test_a_command_cannot_redefine_a_run_option() -> None:
    def command(run: RunOptions, seeds: int = 3) -> None: ...

    with pytest.raises(TypeError, match="seeds"):
        with_run_options(command)


def test_run_options_set_the_spec_fields_they_name() -> None:
    fields_ = RunOptions(seeds=3, requests=10, kv_tokens=99, allow_edited=True).spec_fields()
    assert fields_["seeds"] == (0, 1, 2) and fields_["n_requests"] == 10
    assert fields_["kv_capacity"] == 99 and fields_["trust"].allow_edited
    assert fields_["truth"] == ex.DEFAULT_TRUTH and fields_["predictor"] == ex.DEFAULT_PREDICTOR
    with pytest.raises(InputError, match="--max-goodput"):
        RunOptions(rate_tol=0.1).bracket()
    with pytest.raises(InputError, match="--predictor ''"):
        RunOptions(predictor=" ").spec_fields()


def test_a_study_is_every_target_workload_and_policy_checked() -> None:
    shared = RunOptions(seeds=1, requests=10).spec_fields()
    policies = (PolicySpec.parse("fixed-256"), PolicySpec.parse("sloweave"))
    study = ex.Study(("chat", "long"), policies, rates={"long": 3.0}, shared=shared)
    specs = ex.study_specs(study)
    assert [(s.tpot_slo_ms, s.workload, s.policy.name) for s in specs][:3] == [
        (10.0, "chat", "fixed-256"), (10.0, "chat", "sloweave"), (10.0, "long", "fixed-256")
    ]  # fmt: skip
    assert len(specs) == len(ex.DEFAULT_TARGETS) * 2 * 2
    assert {s.rate for s in specs if s.workload == "long"} == {3.0}
    assert {s.rate for s in specs if s.workload == "chat"} == {ex.default_rate("chat")}
    assert ex.study_folder(Path("o"), specs[0]) == Path("o/chat/fixed-256/tpot-10")
    with pytest.raises(InputError, match="operator driver"):
        ex.study_specs(ex.Study(("chat",), policies[:1], (25.0,), shared=shared,
                                driver=ex.DriverOptions()))  # fmt: skip
    with pytest.raises(InputError, match="at least one"):
        ex.study_specs(ex.Study((), policies, shared=shared))
