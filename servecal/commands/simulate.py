"""``servecal simulate``: one workload × policy over seeds, on any backend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from servecal.commands._common import renamed_flag, user_errors, writes_folder
from servecal.commands._run_options import RunOptions, with_run_options
from servecal.commands._runs import POLICY_OPT_HELP

#: Keys of ``simulate --json``, in order (those a run does not have are left out).
SUMMARY_KEYS = (
    "policy",
    "backend",
    "goodput",
    "attainment",
    "tpot_attainment",
    "p99_ttft_ms",
    "mean_ttft_ms",
    "p99_tpot_ms",
    "max_goodput",
    "max_goodput_std",
    "max_goodput_bound",
    "energy_per_good_request_j",
    "iterations",
    "recomputes",
    "parks",
    "prefix_hit_share",
    "kv_evictions",
    "decision_us_median",
    "tokens_per_decode",  # speculative decoding only
    "online",
    "wakeups",
    "parked_batches",
    "p99_blocking_ms",
    "max_operator_ms",
    "wall_s",
    "busy_s",
    "by_class",
    "by_tpot_slo",
)


@user_errors
@writes_folder("out")
@with_run_options
def simulate_command(
    run: RunOptions,
    workload: str = typer.Option(..., help="chat|mixed|long|bursty|multislo|trace:PATH"),
    policy: str = typer.Option(
        ..., help="A built-in name (servecal policies) or MODULE:CLASS on PYTHONPATH."
    ),
    opt: list[str] = typer.Option([], "--opt", help=POLICY_OPT_HELP),
    tpot_slo: float = typer.Option(
        None, "--tpot-slo", help="TPOT SLO D in ms of requests without their own."
    ),
    out: Path = typer.Option(..., help="Output folder: one run folder per seed."),
    rate: float = typer.Option(
        None, help="Arrival rate, req/s [default: per workload; a trace's own times]."
    ),
    drift: str = typer.Option(None, help="AT:FACTOR[:n=LO-HI,c=LO-HI], e.g. 60s:1.10"),
    backend: str = typer.Option(
        None, help="engine|operator-driver|torch [default: the policy's, for the setting]."
    ),
    executor: str = typer.Option(None, "--executor", hidden=True, help="Old name of --backend."),
    device: str = typer.Option(None, help="Torch backend: auto, cpu or cuda:N."),
    model: str = typer.Option(None, help="Torch backend: model shape (default: the table's)."),
    monitor: bool = typer.Option(
        False, "--monitor", help="Attach the drift monitor; its verdict goes into run.json."
    ),
    adaptive_margin: bool = typer.Option(
        False, "--adaptive-margin", help="Adapt the margin online while drift is detected."
    ),
    stream_iterations: bool = typer.Option(
        False,
        "--stream-iterations",
        help="Engine: write iteration rows to the run folder in batches as the run goes "
        "instead of holding them (long runs: memory holds one batch).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Simulate one workload x policy over seeds; write run folders."""
    from servecal.commands._runs import Bars, checked, say
    from servecal.sched import experiment as ex
    from servecal.sched.experiment.spec import TORCH
    from servecal.sched.policies.options import split_assignments
    from servecal.sched.policies.registry import PolicySpec
    from servecal.sched.runfolder import write_json
    from servecal.util.errors import InputError

    backend = renamed_flag(backend, executor, "--backend", "--executor")
    bracket = run.bracket()
    policy_spec = PolicySpec.parse(policy, split_assignments(opt))
    chosen = ex.choose_backend(policy_spec, run.setting, backend)
    torch = None
    if device is not None or model is not None:
        torch = checked(lambda: ex.TorchOptions(device or "auto", model))
    more = {"drift": drift, "monitor": monitor, "adaptive_margin": adaptive_margin,
            "stream_iterations": stream_iterations}  # fmt: skip
    fields = {**run.spec_fields(), **more, "driver": run.driver(), "torch": torch}
    spec = checked(lambda: ex.run_spec(workload, policy_spec, tpot_slo, rate, chosen, **fields))
    if chosen == TORCH and run.truth is not None:
        raise InputError("--truth is the simulated executor's; drop it with --backend torch")
    ex.check(spec, searching=run.max_goodput)
    label = f"{policy_spec.label} on {workload}"
    if chosen == TORCH:
        _announce_torch(spec, as_json, say)
    total = None if run.max_goodput else len(spec.seeds)
    with Bars(quiet=as_json) as bars:
        (outcome,) = ex.sweep(
            [spec],
            folders=[out],
            goodput=bracket,
            jobs=1 if chosen == TORCH else run.jobs,  # one device: runs one after the other
            on_progress=bars.sweep(label, total),
            on_run_progress=bars.tokens(label) if chosen == TORCH else None,
            force=run.force,
        )
    means = outcome.mean
    write_json(out / "summary.json", {"config": spec.describe(), "mean_over_seeds": means})
    result = {"policy": policy_spec.label, "backend": chosen}
    result.update({k: means[k] for k in SUMMARY_KEYS if k in means})
    if as_json:
        typer.echo(json.dumps(result, default=float))
        return
    _print(spec, result, len(spec.seeds))
    from servecal.sched.result import beyond_grid_line

    beyond = beyond_grid_line(means.get("beyond_grid"))
    if beyond:
        typer.echo(beyond + (" (mean over seeds)" if len(spec.seeds) > 1 else ""))
    typer.echo(f"run folders: {out}/seed-*/")


def _announce_torch(spec: Any, quiet: bool, say: Any) -> None:
    """The torch backend's set-up (its notices, and what it built) before it runs."""
    from servecal.sched.torch_executor.backend import setup_for

    setup = setup_for(spec)
    if quiet:
        return
    for notice in setup.notices:
        say(notice)
    threads = f", {setup.threads} threads" if setup.threads else ""
    say(
        f"torch backend: {setup.model.shape.name} on {setup.device} "
        f"({setup.scale.timed}/{setup.scale.total} layers built{threads})"
    )


def _print(spec, result: dict, seeds: int) -> None:  # noqa: ANN001 - a RunSpec
    from servecal.commands._runs import fmt, goodput_text, print_table

    good = "TTFT" if spec.setting == "prefill" else "TTFT and TPOT"
    target = "" if spec.tpot_slo_ms is None else f" · TPOT {spec.tpot_slo_ms:g} ms"
    rate = "trace times" if spec.rate is None else f"{spec.rate:g} req/s"
    rows = []
    for key, value in result.items():
        if key in ("policy", "backend"):
            continue
        if key == "by_class" and isinstance(value, dict):
            for name, cls in value.items():
                att, ttft = fmt(cls.get("attainment")), fmt(cls.get("p99_ttft_ms"))
                rows.append([f"{name}: attainment / P99 TTFT ms", f"{att} / {ttft}"])
            continue
        if key == "by_tpot_slo" and isinstance(value, dict):  # one row per TPOT tier
            for slo, tier in value.items():
                att, tpot = fmt(tier.get("attainment")), fmt(tier.get("tpot_attainment"))
                share = fmt(tier.get("goodput_share"))
                rows.append([f"TPOT {slo} ms: attain / tpot / share", f"{att} / {tpot} / {share}"])
            continue
        rows.append([key, goodput_text(result) if key == "max_goodput" else fmt(value)])
    title = (
        f"{spec.policy.label} ({spec.backend}) · {spec.workload} · {spec.setting}{target} · "
        f"{rate} · {seeds} seeds (good = meets {good}) · {spec.models}"
    )
    print_table(title, ["metric", "mean over seeds"], rows)


def register(app: typer.Typer) -> None:
    app.command("simulate", help="Simulate one workload x policy over seeds.")(simulate_command)
