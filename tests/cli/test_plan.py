"""``servecal plan``: the cheapest fleet, checked against direct runs; Ray agrees; bad plans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plankit import TRACE, attainment, device, local_and_ray_plans, plan_head, run_plan, runner

from servecal.cli import app
from servecal.sched.cluster.space import load_space

HEAD = plan_head(300, 400, 25, 0.9, (1, 6), ["fixed-512"], ["round-robin", "least-requests"])
SMALL = HEAD + device("A100", 2.0, fleet="A100x1") + device("H100", 3.5, fleet="H100x1")


def test_plan_finds_the_cheapest_fleet_that_meets_the_target(tmp_path):
    result, out = run_plan(tmp_path, SMALL)
    assert result.exit_code == 0, result.output
    assert "cheapest:" in result.output
    doc = json.loads((out / "plan.json").read_text())
    assert (out / "frontier.png").stat().st_size > 1000
    best = doc["answer"]
    space = load_space(tmp_path / "plan.toml")
    n = best["replicas"]
    assert best["cost_per_hour"] == pytest.approx(n * best["price_per_replica_hour"])
    # it meets the target with n replicas and misses it with one fewer
    assert attainment(space, best["config"], n) >= 0.9
    if n > 1:
        assert attainment(space, best["config"], n - 1) < 0.9
    # no other configuration that met the target is cheaper
    met = [r for r in doc["rows"] if r["replicas"] is not None]
    assert len(met) == 4 and min(r["cost_per_hour"] for r in met) == best["cost_per_hour"]
    # the frontier: each member's max goodput is at least the offered rate
    assert doc["frontier"] and all(
        r["max_goodput"] >= 400 for r in doc["rows"] if r["config"] in doc["frontier"]
    )
    # fewer simulations to the answer than a full bisection of every configuration
    assert doc["simulations_to_answer"] < doc["simulations"]


def test_no_frontier_skips_the_goodput_searches(tmp_path):
    result, out = run_plan(tmp_path, SMALL, "--no-frontier", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["answer"]["max_goodput"] is None
    assert not (out / "frontier.png").exists()


@pytest.mark.ray
@pytest.mark.xdist_group("ray")
def test_plan_on_ray_gives_the_local_answer(tmp_path, ray_cluster):
    a, b = local_and_ray_plans(tmp_path, SMALL)
    assert a["answer"]["config"] == b["answer"]["config"]
    assert a["answer"]["replicas"] == b["answer"]["replicas"]
    assert a["answer"]["attainment"] == b["answer"]["attainment"]


BAD = [
    ("[search]\nreplicas = [1, 4]", "missing the [workload] table"),
    (SMALL.replace('fleet = "H100x1"', 'fleet = "B200x1"'), "unknown fleet device"),
    (SMALL.replace("replicas = [1, 6]", "replicas = [4, 2]"), "search.replicas"),
    (
        SMALL.replace('routers = ["round-robin", "least-requests"]', 'routers = ["sloweave"]'),
        "is not a router",
    ),  # fmt: skip
    (
        SMALL.replace('policies = ["fixed-512"]', 'policies = ["round-robin"]'),
        "is not a scheduling policy",
    ),  # fmt: skip
    (SMALL.replace('policies = ["fixed-512"]', 'policies = ["nope"]'), "unknown policy"),
    (SMALL.replace("price_per_gpu_hour = 2.0", "price_per_gpu_hour = -1"), "price_per_gpu_hour"),
    (SMALL.replace("rate = 400", 'rate = "fast"'), "workload.rate"),
    (SMALL.replace(f'trace = "{TRACE}"', 'trace = "missing.csv"'), "no such file"),
    (SMALL.replace("size = 1\nfleet", "size = 0\nfleet", 1), "TP size"),
    (SMALL.replace('fleet = "A100x1"', 'fleet = "A100x1"\ntruth = "device"'), "not both"),
    (
        SMALL.replace('fleet = "A100x1"', 'predictor = "none.json"\ntruth = "device"'),
        "no such file",
    ),  # fmt: skip
    (SMALL + "\n[extra]\n", "unknown table"),
    (
        SMALL.replace('"least-requests"]', '{name = "predicted-latency", quantile = 2}]'),
        "quantile",
    ),  # fmt: skip
    (SMALL.replace('"least-requests"]', '{name = "least-requests", nope = 1}]'), "no option"),
    ("[workload\n", "not valid TOML"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_a_bad_plan_is_one_line_and_exit_2_and_writes_nothing(tmp_path, text, message):
    result, out = run_plan(tmp_path, text)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert not (out / "plan.json").exists()


def test_an_interrupted_plan_keeps_every_simulation_that_finished(tmp_path, monkeypatch):
    import servecal.sched.cluster.planner as planner

    calls = []
    real = planner.execute

    def stop_at_third(task, *args, **kwargs):
        calls.append(task)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(task, *args, **kwargs)

    monkeypatch.setattr(planner, "execute", stop_at_third)
    result, out = run_plan(tmp_path, SMALL)
    assert result.exit_code == 130
    doc = json.loads((out / "plan.json").read_text())
    assert doc["interrupted"] is True and doc["answer"] is None
    assert sum(len(r["probes"]) for r in doc["rows"]) == 2


def test_your_own_device_from_samples_and_a_fitted_table(tmp_path, monkeypatch):
    """A device given as measured samples (the truth) and a table fitted on them, both
    named relative to the plan file, run from another working directory."""
    samples = Path(__file__).resolve().parents[1] / "data" / "costmodels" / "tiny_cpu_noisy.parquet"
    own = tmp_path / "mine"
    own.mkdir()
    (own / "samples.parquet").write_bytes(samples.read_bytes())
    fitted = runner.invoke(app, ["fit", str(own / "samples.parquet"), "--out", str(own / "t.json")])
    assert fitted.exit_code == 0, fitted.output
    text = HEAD.replace("requests = 300", "requests = 40")
    text = text.replace("rate = 400", "rate = 20") + (
        '[[device]]\nname = "cpu"\nprice_per_gpu_hour = 0.1\n[[device.tp]]\nsize = 1\n'
        'truth = "samples:mine/samples.parquet"\npredictor = "mine/t.json"\n'
    )
    monkeypatch.chdir(tmp_path / "mine")
    result, out = run_plan(tmp_path, text, "--no-frontier")
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "plan.json").read_text())
    [hardware] = doc["question"]["hardware"]
    assert hardware["truth"] == f"samples:{own / 'samples.parquet'}"
    assert doc["answer"]["config"].startswith("cpux1 · fixed-512")


def test_the_imported_a100_and_h100_plan_with_options_inline(tmp_path):
    """The shipped aiconfigurator imports as plan devices (samples truth, P50 table),
    with SLOWeave and the predicted-latency router told to plan on P50 inline."""
    data = Path(__file__).resolve().parents[2] / "sched" / "data"
    text = HEAD.replace("rate = 400", "rate = 60")
    text = text.replace('policies = ["fixed-512"]', 'policies = [{name = "sloweave", quantile'
                        ' = 0.5, use_margin = false}]')  # fmt: skip
    text = text.replace('"least-requests"]', '{name = "predicted-latency", quantile = 0.5, '
                        "use_margin = false}]")  # fmt: skip
    for gpu in ("a100", "h100"):
        text += (
            f'[[device]]\nname = "{gpu.upper()}"\nprice_per_gpu_hour = 2.0\n[[device.tp]]\n'
            f'size = 1\ntruth = "samples:{data}/imported_{gpu}x1/samples.csv"\n'
            f'predictor = "{data}/imported_{gpu}x1/table.json"\n'
        )
    result, out = run_plan(tmp_path, text, "--no-frontier")
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "plan.json").read_text())
    rows = {r["config"]: r for r in doc["rows"]}
    routed = (
        "sloweave[quantile=0.5,use_margin=False] · predicted-latency[quantile=0.5,use_margin=False]"
    )
    assert f"H100x1 · {routed}" in rows and f"A100x1 · {routed}" in rows
    # the same price: the H100's iterations are the shorter, so it never needs more replicas
    h100, a100 = rows[f"H100x1 · {routed}"], rows[f"A100x1 · {routed}"]
    assert h100["replicas"] is not None
    assert a100["replicas"] is None or h100["replicas"] <= a100["replicas"]


@pytest.mark.parametrize("name", ["azure_imported.toml", "azure_a100_h100.toml"])
def test_the_shipped_examples_read(name):
    example = Path(__file__).resolve().parents[2] / "examples" / "capacity" / name
    space = load_space(example)
    assert len(space.configs) == 16
