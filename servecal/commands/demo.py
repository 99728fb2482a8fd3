"""``servecal demo``: the main job, from nothing to a report about this device."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from servecal.commands._common import user_errors, writes_folder


@user_errors
@writes_folder("out", runs=False)
def demo(
    budget: float = typer.Option(
        240.0, "--budget", help="Seconds for the whole demo (calibration gets 45%)."
    ),
    out: Path = typer.Option(Path("servecal-demo"), "--out", help="Output folder."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda:N."),
    seeds: int = typer.Option(2, "--seeds", help="Seeds per simulated cell."),
    requests: int = typer.Option(200, "--requests", help="Requests per simulated run."),
    jobs: int = typer.Option(
        None, "--jobs", min=1, help="Simulation processes (default: all cores)."
    ),
    workloads: str = typer.Option(
        "chat,mixed,long,bursty", "--workloads", help="Comma-separated subset of the four."
    ),
    token_scale: float = typer.Option(
        None,
        "--token-scale",
        help="Scale of prompt lengths and chunk sizes (default 1/8 on a CPU, 1 on a GPU).",
    ),
) -> None:
    """Calibrate this device, fit a cost table, simulate the schedulers, write the report."""
    from servecal.commands._runs import Bars, say
    from servecal.reports.demo import DemoCallbacks, DemoConfig, run_demo

    config = DemoConfig(
        out=out,
        budget_s=budget,
        device=device,
        seeds=seeds,
        n_requests=requests,
        jobs=jobs,
        token_scale=token_scale,
        workloads=tuple(w.strip() for w in workloads.split(",") if w.strip()),
    )
    try:
        with Bars() as bars:
            callbacks = DemoCallbacks(say, bars.points(), bars.sweep("simulating", None))
            result = run_demo(config, callbacks)
    except KeyboardInterrupt:
        say(f"interrupted: what was measured is kept in {out}; rerun to continue")
        sys.exit(130)
    typer.echo(f"report: {result.report}")
    typer.echo(f"summary: {result.markdown}")
    typer.echo("time: " + ", ".join(f"{k} {v:.0f} s" for k, v in result.seconds.items()))


def register(app: typer.Typer) -> None:
    app.command(
        "demo", help="Calibrate this device, fit, simulate the schedulers, write the report."
    )(demo)
