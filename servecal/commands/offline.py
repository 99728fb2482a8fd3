"""``servecal offline``: memory-constrained batch scheduling (Sorted-F, MC-SF, FCFS, LP bound)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from servecal.commands._common import user_errors
from servecal.util.errors import InputError


def register(app: typer.Typer) -> None:
    app.command(
        "offline",
        help="Schedule a backlog under a KV cap: FCFS, MC-SF, Sorted-F, Sorted-LP, LP bound.",
    )(offline)


#: Bounds that keep one command within hours: Sorted-F and the baselines are O(n log n)
#: per batch at n = 2,000 in seconds; a polish move costs 0.2-3.7 ms at n = 25-200.
MAX_REQUESTS = 200_000
MAX_SEEDS = 10_000
MAX_POLISH = 1_000_000


def _check_sizes(
    no_file: bool, no_spec: bool, n: int, seeds: int, memory: int, polish: int
) -> None:
    """One source of requests, and sizes that finish in minutes, not hours."""
    if no_file == no_spec:
        raise InputError("give exactly one of --requests FILE or --generate short-long:F")
    if n < 1 or seeds < 1 or memory < 1:
        raise InputError("--n, --seeds and --memory must be >= 1")
    for flag, value, most in (("--n", n, MAX_REQUESTS), ("--seeds", seeds, MAX_SEEDS),
                              ("--polish", polish, MAX_POLISH)):  # fmt: skip
        if value > most:
            raise InputError(f"{flag} {value}: at most {most:,} (one instance would run for hours)")


def _read_instance(requests: Path, n: int, memory: int) -> Any:
    """The first ``n`` requests of a file as an instance; one that could never fit in
    ``memory`` is refused, naming its row."""
    import numpy as np

    from servecal.sched.sortedf.generate import read_requests
    from servecal.sched.sortedf.model import Instance

    s, o = read_requests(requests, n)
    too_big = np.flatnonzero(s + o > memory)
    if too_big.size:
        r = int(too_big[0])
        raise InputError(
            f"{requests}: row {r + 2}: prompt + output = {int(s[r] + o[r])} exceeds "
            f"--memory {memory}; it could never run"
        )
    return Instance(s, o, memory)


@user_errors
def offline(
    requests: Path | None = typer.Option(
        None, "--requests", help="CSV: prompt_tokens,output_tokens (or the Azure trace format)."
    ),
    generate: str | None = typer.Option(
        None, "--generate", help="Synthetic workload, 'short-long:F' (F = short fraction)."
    ),
    n: int = typer.Option(2000, "--n", help="Requests per instance (first n rows of a file)."),
    memory: int = typer.Option(16384, "--memory", help="KV capacity M in tokens."),
    algos: str = typer.Option(
        "fcfs,mc-sf,sorted-f,sorted-lp",
        "--algos",
        help="Comma list of fcfs, mc-sf, sorted-f, sorted-lp, sorted-f-amin, opt (n <= 8).",
    ),
    seeds: int = typer.Option(1, "--seeds", help="Instances (and prediction draws) to average."),
    seed: int = typer.Option(0, "--seed", min=0, help="First seed."),
    solver: str = typer.Option("auto", "--solver", help="Sorted-F Phase 1: auto|dp|swap|quantile."),
    phase2: str = typer.Option(
        "best",
        "--phase2",
        help="Sorted-F Phase 2: best (the least latency of batch with 0-3 batches of "
        "look-ahead and head)|batch (skip within a batch)|head|list.",
    ),
    lookahead: int = typer.Option(
        0, "--lookahead", help="Sorted-F Phase 2 may also admit from this many later batches."
    ),
    polish: int = typer.Option(
        0,
        "--polish",
        help="Sorted-F: this many local moves on its list, scored on the real latency "
        "(0.2-3.7 ms each at n = 25-200; 100000 brought every n <= 200 benchmark "
        "instance within 1.10 of the LP bound; 0: off).",
    ),
    alpha: float = typer.Option(0.1, "--alpha", help="FCFS watermark: admit while <= (1-alpha)M."),
    amin_width: float = typer.Option(
        0.5, "--amin-width", help="Amin predictions: lower bound o*U(1-w, 1)."
    ),
    lp: bool = typer.Option(True, "--lp/--no-lp", help="Compute the LP lower bound and the gap."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Mean latency (steps) per scheduler, ratios to Sorted-F, LP bound and gap, solver time."""
    import numpy as np

    from servecal.sched.sortedf.exact import MAX_N as EXACT_MAX_N
    from servecal.sched.sortedf.generate import parse_spec, short_long
    from servecal.sched.sortedf.runner import OfflineConfig, run_instance

    _check_sizes(requests is None, generate is None, n, seeds, memory, polish)
    try:
        config = OfflineConfig(
            algos=tuple(a.strip() for a in algos.split(",") if a.strip()),
            solver=solver,
            phase2=phase2,
            lookahead=lookahead,
            polish_moves=polish,
            alpha=alpha,
            amin_width=amin_width,
            lp_bound=lp,
        )
    except ValueError as exc:
        raise InputError(str(exc)) from None
    fixed = None
    if requests is not None:
        fixed = _read_instance(requests, n, memory)
    else:
        frac = parse_spec(generate or "")
    size = fixed.n if fixed is not None else n
    if "opt" in config.algos and size > EXACT_MAX_N:
        raise InputError(
            f"--algos opt (exact search) needs at most {EXACT_MAX_N} requests, not {size}"
        )

    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TimeElapsedColumn

    outcomes = []
    # A seed can take minutes (an LP at n <= 200, or many --polish moves): the
    # spinner and elapsed time show that it is still working.
    columns = (SpinnerColumn(), *Progress.get_default_columns(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("scheduling", total=seeds)
        for k in range(seeds):
            rng = np.random.default_rng(seed + k)
            inst = fixed if fixed is not None else short_long(n, frac, memory, rng)
            outcomes.append((inst, run_instance(inst, config, rng)))
            bar.advance(task)

    summary = _summarise(outcomes, config.algos)
    if as_json:  # exactly the shape: evictions are for the table only
        algos_out = {
            name: {"mean_latency": row["mean_latency"], "solver_s": row["solver_s"]}
            for name, row in summary["algos"].items()
        }
        out = {"algos": algos_out, "lp_bound": summary["lp_bound"], "gap": summary["gap"]}
        typer.echo(json.dumps(out))
        return
    _print_table(summary, outcomes[0][0], seeds)


def _summarise(outcomes: list, names: tuple[str, ...]) -> dict:
    def mean(xs: list) -> float:
        return float(sum(xs) / len(xs))

    algos = {
        name: {
            "mean_latency": mean([oc.algos[name].sim.mean_latency for _, oc in outcomes]),
            "solver_s": mean([oc.algos[name].solver_s for _, oc in outcomes]),
            "evictions": mean([oc.algos[name].sim.evictions for _, oc in outcomes]),
        }
        for name in names
    }
    bounds = [oc.lp.mean for _, oc in outcomes if oc.lp is not None]
    gaps = [g for g in (oc.gap() for _, oc in outcomes) if g is not None]
    return {
        "algos": algos,
        "lp_bound": mean(bounds) if bounds else None,
        "gap": mean(gaps) if gaps else None,
    }


def _print_table(summary: dict, inst, seeds: int) -> None:
    from rich.console import Console
    from rich.table import Table

    algos = summary["algos"]
    ref_name = (
        "sorted-f" if "sorted-f" in algos else min(algos, key=lambda a: algos[a]["mean_latency"])
    )
    ref = algos[ref_name]["mean_latency"]
    lp = summary["lp_bound"]
    table = Table(
        title=f"n = {inst.n}, M = {inst.memory} tokens, {seeds} seed(s); latency in steps"
    )
    table.add_column("algorithm", no_wrap=True)
    table.add_column("mean latency", justify="right")
    table.add_column(f"÷ {ref_name}", justify="right")
    table.add_column("÷ LP bound", justify="right")
    table.add_column("evictions", justify="right")
    table.add_column("solver s", justify="right")
    for name, row in algos.items():
        table.add_row(
            name,
            f"{row['mean_latency']:.1f}",
            f"{row['mean_latency'] / ref:.2f}×",
            f"{row['mean_latency'] / lp:.3f}" if lp else "-",
            f"{row['evictions']:.0f}",
            f"{row['solver_s']:.2f}",
        )
    console = Console()
    console.print(table)
    if lp:
        console.print(
            f"LP lower bound on mean latency: {lp:.1f}; gap ({ref_name} ÷ LP): {summary['gap']:.3f}"
        )
