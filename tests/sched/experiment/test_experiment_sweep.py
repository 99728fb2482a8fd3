"""The experiment layer: one run per (spec, seed), the same numbers wherever it runs."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from servecal.costmodels import InputError
from servecal.sched.experiment import (
    RunSpec,
    check,
    choose_backend,
    default_rate,
    run,
    summarize,
    sweep,
)
from servecal.sched.policies import PolicySpec


def _spec(policy: str = "sloweave", **kw) -> RunSpec:
    base = dict(workload="mixed", policy=PolicySpec(policy), tpot_slo_ms=25.0, rate=30.0,
                n_requests=80, seeds=(0, 1))  # fmt: skip
    return RunSpec(**{**base, **kw})


def test_a_run_is_a_pure_function_of_spec_and_seed():
    spec = _spec(truth="analytic:sigma=0.1", predictor="oracle")
    a, b = run(spec, 1), run(spec, 1)
    assert a.requests.equals(b.requests)
    assert a.iterations.drop(columns="decision_us").equals(b.iterations.drop(columns="decision_us"))
    assert not run(spec, 0).requests.equals(a.requests)  # another seed, other requests


@pytest.mark.parametrize("where", ["pool", "threads"])
def test_the_sweep_gives_the_same_numbers_in_process_in_a_pool_or_elsewhere(where, tmp_path):
    specs = [_spec("fixed-256", truth="analytic:sigma=0.1", predictor="oracle"), _spec()]
    here = sweep(specs, jobs=1)
    if where == "pool":
        there = sweep(specs, jobs=2)
    else:  # any concurrent.futures executor plugs in (a Ray one would, the same way)
        with ThreadPoolExecutor(2) as pool:
            there = sweep(specs, pool=pool)
    for a, b in zip(here, there, strict=True):
        for x, y in zip(a.summaries, b.summaries, strict=True):
            x.pop("decision_us_median"), y.pop("decision_us_median")
            assert x == y
        assert a.mean["goodput"] == b.mean["goodput"] and a.mean["seeds"] == 2


def test_the_sweep_writes_run_folders_and_averages_seeds(tmp_path):
    spec = _spec()
    seen = []
    (outcome,) = sweep([spec], folders=[tmp_path / "s"], jobs=1, on_progress=seen.append)
    assert [p.done for p in seen] == [1, 2] and seen[-1].total == 2
    for seed, summary in zip(spec.seeds, outcome.summaries, strict=True):
        doc = json.loads((tmp_path / "s" / f"seed-{seed}" / "run.json").read_text())
        assert doc["config"]["seed"] == seed and doc["config"]["policy"] == "sloweave"
        assert doc["config"]["policy_options"]["c_max"] == 4096
        assert doc["summary"]["goodput"] == pytest.approx(summary["goodput"])
    mean = (outcome.summaries[0]["goodput"] + outcome.summaries[1]["goodput"]) / 2
    assert outcome.mean["goodput"] == pytest.approx(mean) and "goodput_std" in outcome.mean
    assert summarize(spec, run(spec, 0))["goodput"] == outcome.summaries[0]["goodput"]


def test_backends_follow_the_policy_and_the_setting():
    assert choose_backend(PolicySpec("sloweave"), "colocated") == "engine"
    assert choose_backend(PolicySpec("flowprefill"), "colocated") == "operator-driver"
    assert choose_backend(PolicySpec("fcfs"), "prefill") == "operator-driver"
    assert choose_backend(PolicySpec("sloweave"), "colocated", "torch") == "torch"
    with pytest.raises(InputError, match="engine only"):
        choose_backend(PolicySpec("sloweave"), "prefill")
    with pytest.raises(InputError, match="not torch"):
        choose_backend(PolicySpec("flowprefill"), "colocated", "torch")
    assert default_rate("mixed") == 60.0 and default_rate("multislo", "prefill") == 90.0
    assert default_rate("trace:x.csv") is None


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(setting="prefill", backend="operator-driver", policy="fcfs"),
         "does not apply to --setting prefill"),
        (dict(tpot_slo_ms=None), "--tpot-slo is required"),
        (dict(backend="torch"), "needs --predictor TABLE.json"),
        (dict(monitor=True, backend="operator-driver", policy="flowprefill"),
         "--monitor"),
        (dict(slo_classes="multislo"), "--slo-classes applies to trace"),
        (dict(predictor="oracle", truth="samples:missing.parquet"), "missing.parquet"),
    ],
)  # fmt: skip
def test_a_spec_that_cannot_run_is_refused_up_front(kw, message):
    with pytest.raises(InputError) as info:
        check(_spec(**kw))
    assert message in str(info.value)


def test_a_pool_worker_takes_ctrl_c_only_inside_a_run(monkeypatch):
    """Between runs a worker notes Ctrl-C and starts nothing more (a worker killed in
    the pool's queue traffic can leave the driver's shutdown waiting forever)."""
    import importlib

    sweep_module = importlib.import_module("servecal.sched.experiment.sweep")
    monkeypatch.setattr(sweep_module, "_interrupted", False)
    sweep_module._worker_sigint(2, None)  # idle: noted, not raised
    assert sweep_module._interrupted
    with pytest.raises(KeyboardInterrupt):  # a run queued before Ctrl-C is refused
        sweep_module.execute(sweep_module.Task(_spec(), 0))
    monkeypatch.setattr(sweep_module, "_running", True)
    with pytest.raises(KeyboardInterrupt):  # inside a run: raised there
        sweep_module._worker_sigint(2, None)
