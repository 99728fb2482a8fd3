"""``servecal validate``: does a cost table still hold? (a deployment gate: exit 0 / 1 / 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from servecal.commands._common import user_errors

#: Above this many rows the replay shows a progress bar.
PROGRESS_ROWS = 50_000
#: Regions listed in the text verdict (most suspicious first).
SHOW_REGIONS = 8


@user_errors
def validate(
    table: Path = typer.Argument(..., help="Cost table (JSON) to check."),
    measurements: Path = typer.Argument(
        ..., help="New measurements: a samples file (Parquet/CSV) or a run folder."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the verdict as JSON."),
    min_shift: float = typer.Option(
        0.05, "--min-shift", help="Smallest relative change of the median worth flagging."
    ),
) -> None:
    """Replay measurements against a table: `valid` (exit 0) or `drifted` (exit 1)."""
    from servecal.commands._tp import validate_warning
    from servecal.costmodels import CostTable, InputError
    from servecal.costmodels.drift import DriftConfig
    from servecal.costmodels.drift.replay import load_measurements, replay

    try:
        config = DriftConfig(min_shift=min_shift)
    except ValueError as exc:
        raise InputError(f"--min-shift: {exc}") from None
    cost_table = CostTable.load(table)
    frame, kind = load_measurements(measurements)
    if tp_note := validate_warning(table, cost_table.tp, measurements):
        typer.echo(tp_note, err=True)
    if len(frame) > PROGRESS_ROWS and not as_json:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("replaying", total=len(frame))
            result = replay(cost_table, frame, kind, config=config,
                            progress=lambda done: bar.update(task, completed=done))  # fmt: skip
    else:
        result = replay(cost_table, frame, kind, config=config)
    if as_json:
        typer.echo(json.dumps(result, indent=1))
    else:
        typer.echo(_text(result))
    raise typer.Exit(0 if result["verdict"] == "valid" else 1)


def _text(r: dict[str, Any]) -> str:
    lines = [
        f"verdict: {r['verdict']}",
        f"rows: {r['rows']} ({r['kind']})",
        f"median actual/P50: {r['median_ratio']:.3f}   estimated shift: ×{r['factor']:.3f}",
        f"coverage (actual <= P99 + margin): {r['coverage']:.2%} "
        f"(promised {r['coverage_promised']:.0%})",
    ]
    out = r["outside_domain"]
    if out["iterations"]:
        lines.append(
            f"outside the table's grid: {out['iterations']} rows "
            f"(coverage {out['coverage']:.1%}), not tested for drift"
        )
    for a in r["alarms"]:
        size = f"×{a['factor']:.3f}" if "factor" in a else f"tail rate {a['exceed_rate']:.2%}"
        lines.append(f"alarm: {a['detector']} at row {a['index']} ({size})")
    for reg in r["regions"][:SHOW_REGIONS]:
        lines.append(
            f"  region {reg['region']}: {reg['status']}, ×{reg['factor']:.3f}, "
            f"coverage {reg['coverage']:.1%}, {reg['iterations']} rows"
        )
    if len(r["regions"]) > SHOW_REGIONS:
        lines.append(f"  ... {len(r['regions']) - SHOW_REGIONS} more regions (--json lists all)")
    lines.append(r["recommendation"])
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    app.command(
        "validate",
        help="Replay new measurements against a cost table: valid (exit 0) or drifted (exit 1).",
    )(validate)
