"""``servecal report``: one self-contained HTML page and a Markdown summary."""

from __future__ import annotations

from pathlib import Path

import typer

from servecal.commands._common import (
    ALLOW_EDITED_HELP,
    ALLOW_MISMATCH_HELP,
    STRICT_HELP,
    table_trust,
    user_errors,
    writes_folder,
)


@user_errors
@writes_folder("out", runs=False)
def report(
    inputs: list[Path] = typer.Argument(
        ..., help="Run folders, calibration folders, or folders above them (searched)."
    ),
    out: Path = typer.Option(..., "--out", help="Folder for report.html and report.md."),
    title: str = typer.Option("servecal report", "--title", help="Page title."),
    strict: bool = typer.Option(False, "--strict", help=STRICT_HELP),
    allow_edited: bool = typer.Option(False, "--allow-edited", help=ALLOW_EDITED_HELP),
    allow_mismatch: bool = typer.Option(False, "--allow-mismatch", help=ALLOW_MISMATCH_HELP),
) -> None:
    """Write an HTML report (figures embedded) and a Markdown summary of runs and calibrations."""
    trust = table_trust(allow_edited, strict, allow_mismatch)
    from servecal.reports import build_report

    files = build_report(inputs, out, title=title, trust=trust)
    typer.echo(f"report: {files.html}")
    typer.echo(f"summary: {files.markdown}")


def register(app: typer.Typer) -> None:
    app.command(
        "report",
        help="Write an HTML report (figures embedded) and a Markdown summary of runs/calibrations.",
    )(report)
