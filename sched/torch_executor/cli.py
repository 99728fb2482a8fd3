"""``servecal simulate --executor torch``: option checks, live progress, notices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servecal.costmodels.errors import InputError
from servecal.sched.simulate import SimulationConfig

EXECUTORS = ("simulated", "torch")


def check_executor(name: str) -> str:
    if name not in EXECUTORS:
        raise InputError(f"--executor {name!r}: expected {' or '.join(EXECUTORS)}")
    return name


def simulate_torch_cli(
    config: SimulationConfig,
    out: Path,
    device: str,
    model: str | None,
    max_goodput: bool,
    quiet: bool,
) -> dict[str, Any]:
    """Run every seed of ``config`` on the torch executor with a live progress bar."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    from servecal.sched.torch_executor.run import Progress as RunProgress
    from servecal.sched.torch_executor.run import simulate_torch
    from servecal.sched.torch_executor.setup import load_setup

    if config.predictor == "oracle":
        raise InputError(
            "--executor torch needs --predictor TABLE.json, from servecal calibrate "
            "on the same device and model shape"
        )
    if max_goodput:
        raise InputError(
            "--executor torch does not bisect --max-goodput (each probe is a real run)"
        )
    if config.drift:
        raise InputError("--drift slows the simulated truth down; the torch executor measures")
    if config.truth != "analytic":
        raise InputError("--truth is the simulated executor's; drop it with --executor torch")
    setup = load_setup(config.predictor, device, model)
    err = Console(stderr=True)
    if not quiet:
        for notice in setup.notices:
            # soft_wrap: a notice names files; rich must not break it across lines
            err.print(notice, markup=False, highlight=False, soft_wrap=True)
        err.print(
            f"torch executor: {setup.model.shape.name} on {setup.device} "
            f"({setup.scale.timed}/{setup.scale.total} layers built"
            + (f", {setup.threads} threads" if setup.threads else "")
            + ")",
            markup=False,
            highlight=False,
        )
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[live]}"),
    )
    with Progress(*columns, console=err, disable=quiet or not err.is_terminal) as bar:
        tasks: dict[int, Any] = {}

        def update(seed: int, p: RunProgress) -> None:
            if seed not in tasks:
                tasks[seed] = bar.add_task(
                    f"seed {seed} · {config.policy} on {config.workload} (tokens)",
                    total=p.tokens_total,
                    live="",
                )
            live = p.validation.line()
            if p.drift_state is not None:
                live += f" · drift {p.drift_state}"
            bar.update(tasks[seed], completed=p.tokens_done, live=live)

        means = simulate_torch(config, setup, out, on_progress=update)
    if not quiet:
        online = means.get("online") or {}
        cov, mape = online.get("p99_coverage"), online.get("p50_mape")
        err.print(
            f"wall {means.get('wall_s', 0):.1f} s, device busy {means.get('busy_s', 0):.1f} s; "
            f"online P99+δ coverage {'-' if cov is None else f'{100 * cov:.1f}%'}, "
            f"P50 MAPE {'-' if mape is None else f'{100 * mape:.1f}%'} (mean over seeds)",
            markup=False,
            highlight=False,
        )
    return means
