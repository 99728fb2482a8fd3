"""``servecal fleet``: calibrate every (device, model, TP) job of a plan, locally or on Ray."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from servecal.commands._common import user_errors, writable_folder


def register(app: typer.Typer) -> None:
    app.command(
        "fleet",
        help="Run a plan of calibration/import jobs (locally or on Ray) into one fleet folder.",
    )(fleet)


def _describe(entry: dict[str, Any]) -> str:
    m = entry.get("metrics") or {}
    parts = []
    if m.get("p50_mape") is not None:
        parts.append(f"P50 MAPE {100 * m['p50_mape']:.1f}%")
    if m.get("p99_coverage") is not None:
        parts.append(f"coverage {100 * m['p99_coverage']:.1f}%")
    measured, planned = entry.get("points_measured"), entry.get("points_planned")
    if measured is not None:
        parts.append(f"{measured}/{planned} points" if planned else f"{measured} points measured")
    where = entry.get("where") or {}
    if where.get("host"):
        gpus = f" GPU {','.join(where['gpus'])}" if where.get("gpus") else ""
        parts.append(f"on {where['host']}{gpus}")
    if entry.get("wall_s") is not None:
        parts.append(f"{entry['wall_s']:.0f} s")
    return ", ".join(parts)


@user_errors
def fleet(
    plan: Path = typer.Argument(
        ..., help="Plan file (TOML or JSON) of job and matrix entries (docs/fleet.md)."
    ),
    out: Path = typer.Option(..., "--out", help="Fleet folder (rerun with it to resume)."),
    backend: str = typer.Option("local", "--backend", help="local or ray."),
    address: str = typer.Option(
        None,
        "--address",
        help="Ray cluster to join (auto, host:port, ray://host:10001). Default: start a "
        "local Ray instance sized to this machine.",
    ),
) -> None:
    """Calibrate a fleet: each job writes a calibration folder; one index and one dataset."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from servecal.profiler.fleet import load_plan, run_fleet
    from servecal.profiler.jobs import open_backend
    from servecal.sched.torch_executor.calibration import PagedLayout

    spec = load_plan(plan)
    console = Console(stderr=True, soft_wrap=True)
    columns = (
        TextColumn("jobs"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
    )
    from servecal.util.folders import folder_lock

    writable_folder(out, "--out")
    with (
        folder_lock(out, "servecal fleet"),
        open_backend(backend, address) as runner,
        Progress(*columns, console=console) as bar,
    ):
        task = bar.add_task("", total=None)

        def started(todo: list[str], kept: list[str], refused: dict[str, str]) -> None:
            console.print(
                f"{len(spec.jobs)} jobs: {len(todo)} to run on {runner.describe()}, "
                f"{len(kept)} finished before, {len(refused)} refused"
            )
            for name, reason in refused.items():
                console.print(f"refused {name}: {reason}")
            bar.update(task, total=len(todo), completed=0)

        def finished(name: str, entry: dict[str, Any], done: int, total: int) -> None:
            status = entry["status"]
            detail = entry["error"] if status == "failed" else _describe(entry)
            console.print(f"{status:<11} {name}: {detail}")
            bar.update(task, completed=done, description=name)

        try:
            outcome = run_fleet(
                spec, out, runner, {PagedLayout.name: PagedLayout}, started, finished
            )
        except KeyboardInterrupt:
            console.print(
                f"interrupted: finished jobs and measured points are kept; "
                f"rerun `servecal fleet {plan} --out {out}` to resume"
            )
            raise typer.Exit(130) from None
    typer.echo(f"wrote {outcome.index}")
    typer.echo(
        f"wrote {out / 'samples'}/: {outcome.dataset_rows} rows from "
        f"{len(outcome.ran) + len(outcome.kept)} finished jobs (hive: device/model/tp)"
    )
    if outcome.failed:
        typer.echo(
            f"failed: {', '.join(outcome.failed)} (errors in {outcome.index}); rerun "
            f"`servecal fleet {plan} --out {out}` to retry them",
            err=True,
        )
        raise typer.Exit(1)
