"""``servecal export``: a cost table in long form (one row per grid cell)."""

from __future__ import annotations

from pathlib import Path

import typer

from servecal.commands._common import ALLOW_EDITED_HELP, user_errors, writable_file


@user_errors
def export(
    table: Path = typer.Argument(..., help="Cost table (JSON)."),
    fmt: str = typer.Option("parquet", "--format", help="parquet | csv."),
    out: Path = typer.Option(..., "--out", help="File to write."),
    allow_edited: bool = typer.Option(False, "--allow-edited", help=ALLOW_EDITED_HELP),
) -> None:
    """Write the table's grid, quantiles, margin and energy, one row per cell."""
    from servecal.costmodels import CostTable
    from servecal.costmodels.export import export_table

    writable_file(out)
    rows = export_table(CostTable.load(table, allow_edited=allow_edited or None), out, fmt)
    typer.echo(f"wrote {rows} rows to {out}")


def register(app: typer.Typer) -> None:
    app.command("export", help="Export a cost table in long form (Parquet or CSV).")(export)
