"""``servecal export``: a cost table in long form (one row per grid cell)."""

from __future__ import annotations

from pathlib import Path

import typer

from servecal.commands._common import user_errors


@user_errors
def export(
    table: Path = typer.Argument(..., help="Cost table (JSON)."),
    fmt: str = typer.Option("parquet", "--format", help="parquet | csv."),
    out: Path = typer.Option(..., "--out", help="File to write."),
) -> None:
    """Write the table's grid, quantiles, margin and energy, one row per cell."""
    from servecal.costmodels import CostTable
    from servecal.costmodels.export import export_table

    rows = export_table(CostTable.load(table), out, fmt)
    typer.echo(f"wrote {rows} rows to {out}")


def register(app: typer.Typer) -> None:
    app.command("export", help="Export a cost table in long form (Parquet or CSV).")(export)
