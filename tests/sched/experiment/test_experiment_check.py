"""check(spec): each concern's refusals (setting, backend options, the torch backend's
limits), one line before anything runs; the shared cases are in test_experiment_sweep."""

from __future__ import annotations

import pytest

from servecal.costmodels import InputError
from servecal.sched.experiment import RunSpec, check
from servecal.sched.experiment.spec import DriverOptions, TorchOptions
from servecal.sched.policies import PolicySpec


def _spec(policy: str = "sloweave", **kw) -> RunSpec:
    base = dict(workload="mixed", policy=PolicySpec(policy), tpot_slo_ms=25.0, rate=30.0,
                n_requests=80)  # fmt: skip
    return RunSpec(**{**base, **kw})


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(setting="prefill", tpot_slo_ms=None, policy="fcfs"),
         "--setting prefill runs on the operator driver, not the engine"),
        (dict(driver=DriverOptions()), "--granularity/--scheduling apply to the operator driver"),
        (dict(torch=TorchOptions()), "--device/--model apply to --backend torch, not the engine"),
        (dict(backend="operator-driver", policy="flowprefill", adaptive_margin=True),
         "--monitor/--adaptive-margin watch the engine's iterations"),
        (dict(backend="torch", drift="0.5:2"), "--drift slows the simulated truth down"),
        (dict(backend="torch", truth="analytic"), "--truth is the simulated executor's"),
        (dict(backend="torch", power="a100"), "--power prices simulated iterations"),
    ],
)  # fmt: skip
def test_each_refusal_names_the_option(kw: dict, message: str) -> None:
    with pytest.raises(InputError) as info:
        check(_spec(**kw))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_torch_backend_is_not_searched() -> None:
    with pytest.raises(InputError, match="does not search --max-goodput"):
        check(_spec(backend="torch"), searching=True)
