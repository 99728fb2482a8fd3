"""``servecal eval``: accuracy of a cost table on measured samples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from servecal.commands._common import (
    ALLOW_EDITED_HELP,
    ALLOW_MISMATCH_HELP,
    STRICT_HELP,
    table_trust,
    user_errors,
)


def print_metrics(metrics: dict[str, Any]) -> None:
    """Human-readable metrics, one per line."""

    def pct(v: float | None) -> str:
        return "n/a (no P50)" if v is None else f"{v:.2%}"

    cov = metrics["p99_coverage"]
    tight = metrics["tightness"]
    typer.echo(f"  P50 MAPE (per point):        {pct(metrics['p50_mape'])}")
    typer.echo(
        "  P99+δ coverage (per row):    "
        + ("n/a (no tail: medians only)" if cov is None else f"{cov:.2%}")
    )
    for q, loss in metrics["pinball"].items():
        typer.echo(f"  pinball loss q={q:<6g}        {loss:.4f} ms")
    typer.echo("  tightness (P99+δ)/actual−1:  " + ("n/a" if tight is None else f"{tight:.2%}"))
    typer.echo(f"  rows beyond the table's grid: {metrics['out_of_domain']} (priced at the edge)")
    typer.echo(f"  rows checked (in the grid):  {metrics['checked']} of {metrics['rows']}")


@user_errors
def eval_table(
    table: Path = typer.Argument(..., help="Cost table (JSON)."),
    samples: Path = typer.Argument(..., help="Samples file (Parquet or CSV) to check against."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    strict: bool = typer.Option(False, "--strict", help=STRICT_HELP),
    allow_edited: bool = typer.Option(False, "--allow-edited", help=ALLOW_EDITED_HELP),
    allow_mismatch: bool = typer.Option(False, "--allow-mismatch", help=ALLOW_MISMATCH_HELP),
) -> None:
    """P50 MAPE, P99+δ coverage, pinball loss, margin tightness and rows beyond the grid."""
    trust = table_trust(allow_edited, strict, allow_mismatch)
    from servecal.costmodels import CostTable, InputError
    from servecal.costmodels.evaluate import evaluate
    from servecal.costmodels.samples import read_samples

    data = read_samples(samples)
    loaded = CostTable.load(
        table,
        fingerprint=data.provenance or None,
        other=str(samples),
        trust=trust,
    )
    if data.frame.empty:
        raise InputError(f"{samples}: no sample rows: nothing to check")
    metrics = evaluate(loaded, data.frame)
    if metrics["checked"] == 0:
        raise InputError(
            f"none of the {metrics['rows']} rows of {samples} lies inside the table's grid "
            f"({', '.join(f'{a} {lo}..{hi}' for a, (lo, hi) in loaded.domain.items())}): "
            "nothing checked"
        )
    if as_json:
        doc = dict(metrics)
        doc["pinball"] = {repr(q): v for q, v in metrics["pinball"].items()}
        typer.echo(json.dumps(doc))
    else:
        print_metrics(metrics)


def register(app: typer.Typer) -> None:
    app.command("eval", help="Measure a cost table's accuracy on samples.")(eval_table)
