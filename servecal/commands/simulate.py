"""``servecal simulate``: one workload × policy × TPOT target over seeds."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from servecal.commands._common import (
    ALLOW_EDITED_HELP,
    STRICT_HELP,
    table_flags,
    user_errors,
    writes_folder,
)

SUMMARY_KEYS = (
    "goodput",
    "attainment",
    "tpot_attainment",
    "p99_ttft_ms",
    "p99_tpot_ms",
    "mean_ttft_ms",
    "max_goodput",
    "energy_per_good_request_j",
    "iterations",
    "preemptions",
    "decision_us_median",
    "online",
)


@user_errors
@writes_folder("out")
def simulate_command(
    workload: str = typer.Option(..., help="chat|mixed|long|bursty|trace:PATH"),
    policy: str = typer.Option(..., help="fixed-64..2048, budget-C, full, sloweave, ..."),
    tpot_slo: float = typer.Option(..., "--tpot-slo", help="TPOT SLO D in ms."),
    out: Path = typer.Option(..., help="Output folder: one run folder per seed."),
    rate: float = typer.Option(
        None, help="Arrival rate, req/s [default: per workload; a trace's own times]."
    ),
    seeds: int = typer.Option(5, min=1, help="Seeds 0..N-1."),
    requests: int = typer.Option(2000, help="Requests per run."),
    truth: str = typer.Option(
        "analytic",
        help="analytic[:sigma=..,spike_prob=..,spike_factor=..,power_w=..] or samples:PATH",
    ),
    predictor: str = typer.Option("oracle", help="oracle or a cost table JSON."),
    drift: str = typer.Option(None, help="AT:FACTOR[:n=LO-HI,c=LO-HI], e.g. 60s:1.10"),
    kv_tokens: int = typer.Option(500_000, min=1, help="KV capacity M in tokens."),
    max_goodput: bool = typer.Option(False, "--max-goodput", help="Also bisect the max goodput."),
    rate_range: str = typer.Option("1:200", help="Bracket LO:HI (req/s) for --max-goodput."),
    p50_only: bool = typer.Option(
        False, "--p50-only", help="SLOWeave plans on P50 with no margin."
    ),
    c_max: int = typer.Option(4096, help="SLOWeave: largest chunk C_max."),
    aging_ms: float = typer.Option(None, help="SLOWeave: aging threshold ms [default: off]."),
    aging_chunk: int = typer.Option(256, help="SLOWeave: minimum chunk of an aged prompt."),
    admission: bool = typer.Option(False, "--admission", help="SLOWeave: admission control."),
    multi_prefill: bool = typer.Option(
        False, "--multi-prefill", help="SLOWeave: first-fit several prompts per iteration."
    ),
    setting: str = typer.Option(
        None, help="FlowPrefill study: prefill|colocated (docs/flowprefill.md)."
    ),
    slo_classes: str = typer.Option(
        None, "--slo-classes", help="Stamp a workload's SLO classes on a trace, e.g. multislo."
    ),
    granularity: str = typer.Option("attn-mlp", help="FlowPrefill: layer|attn-mlp|fine."),
    scheduling: str = typer.Option("event", help="FlowPrefill: event|iteration wake-ups."),
    executor: str = typer.Option(
        "simulated", help="simulated, or torch: real forward passes (needs a calibrated table)."
    ),
    device: str = typer.Option("auto", help="torch executor: auto, cpu or cuda:N."),
    model: str = typer.Option(None, help="torch executor: model shape (default: the table's)."),
    monitor: bool = typer.Option(
        False, "--monitor", help="Attach the drift monitor; its verdict goes into run.json."
    ),
    adaptive_margin: bool = typer.Option(
        False, "--adaptive-margin", help="Adapt the margin online while drift is detected."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    strict: bool = typer.Option(False, "--strict", help=STRICT_HELP),
    allow_edited: bool = typer.Option(False, "--allow-edited", help=ALLOW_EDITED_HELP),
) -> None:
    """Simulate one workload x policy x TPOT target over seeds; write run folders."""
    table_flags(allow_edited, strict)
    from servecal.sched.flowprefill.registry import is_flow_policy

    if setting is not None or slo_classes is not None or is_flow_policy(policy):
        from servecal.sched.flowprefill.commands import run_simulate_command

        return run_simulate_command(
            workload=workload, policy=policy, setting=setting, out=out, rate=rate, seeds=seeds,
            requests=requests, truth=truth, predictor=predictor, kv_tokens=kv_tokens,
            max_goodput=max_goodput, rate_range=rate_range, slo_classes=slo_classes,
            granularity=granularity, scheduling=scheduling, tpot_slo=tpot_slo, as_json=as_json,
        )  # fmt: skip
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from servecal.costmodels.errors import InputError
    from servecal.sched.compare import default_rate
    from servecal.sched.policies import SLOWeaveConfig, parse_policy
    from servecal.sched.runfolder import write_json
    from servecal.sched.simulate import (
        SimulationConfig,
        load_predictor,
        load_truth,
        parse_range,
        simulate,
    )
    from servecal.sched.truth import parse_drift

    try:
        opts = SLOWeaveConfig(
            c_max=c_max,
            quantile=0.5 if p50_only else 0.99,
            use_margin=not p50_only,
            aging_ms=aging_ms,
            aging_chunk=aging_chunk,
            admission=admission,
            multi_prefill=multi_prefill,
        )
        config = SimulationConfig(
            workload=workload,
            policy=policy,
            tpot_slo_ms=tpot_slo,
            rate=rate if rate is not None else default_rate(workload),
            n_requests=requests,
            seeds=tuple(range(seeds)),
            truth=truth,
            predictor=predictor,
            drift=drift,
            kv_capacity=kv_tokens,
            sloweave=opts,
            monitor=monitor,
            adaptive_margin=adaptive_margin,
        )
    except ValueError as exc:
        raise InputError(str(exc)) from None
    # fail on bad names and files before any run starts
    from servecal.sched.workloads import parse_workload

    parse_workload(workload)
    parse_policy(policy, opts)
    load_predictor(predictor, load_truth(truth))
    if drift:
        parse_drift(drift)
    bracket = parse_range(rate_range) if max_goodput else None
    err = Console(stderr=True)
    from servecal.sched.torch_executor.cli import check_executor, simulate_torch_cli

    if check_executor(executor) == "torch":
        means = simulate_torch_cli(config, out, device, model, max_goodput, as_json)
    else:
        with Progress(console=err, transient=True, disable=as_json or not err.is_terminal) as bar:
            # the max-goodput bisection adds an unknown number of probes: no total then
            total = None if max_goodput else len(config.seeds)
            task = bar.add_task(f"{policy} on {workload}", total=total)
            means = simulate(config, out, bracket, on_run=lambda: bar.advance(task))
    write_json(out / "summary.json", {"config": config.describe(), "mean_over_seeds": means})
    result = {k: means.get(k) for k in SUMMARY_KEYS if k != "max_goodput" or max_goodput}
    if as_json:
        typer.echo(json.dumps(result, default=float))
        return

    table = Table(title=f"{policy} · {workload} · TPOT {tpot_slo:g} ms · {seeds} seeds")
    table.add_column("metric")
    table.add_column("mean over seeds", justify="right")
    for key, value in result.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={'-' if v is None else f'{v:.3g}'}" for k, v in value.items())
        elif isinstance(value, float):
            value = f"{value:.4g}"
        table.add_row(key, "-" if value is None else str(value))
    Console().print(table)
    typer.echo(f"run folders: {out}/seed-*/")


def register(app: typer.Typer) -> None:
    app.command("simulate", help="Simulate one workload x policy x TPOT target over seeds.")(
        simulate_command
    )
