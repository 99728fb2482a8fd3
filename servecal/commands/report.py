"""``servecal report``: one self-contained HTML page and a Markdown summary."""

from __future__ import annotations

from pathlib import Path

import typer

from servecal.commands._common import user_errors


@user_errors
def report(
    inputs: list[Path] = typer.Argument(
        ..., help="Run folders, calibration folders, or folders above them (searched)."
    ),
    out: Path = typer.Option(..., "--out", help="Folder for report.html and report.md."),
    title: str = typer.Option("servecal report", "--title", help="Page title."),
) -> None:
    """Write an HTML report (figures embedded) and a Markdown summary of runs and calibrations."""
    from servecal.reports import build_report

    files = build_report(inputs, out, title=title)
    typer.echo(f"report: {files.html}")
    typer.echo(f"summary: {files.markdown}")


def register(app: typer.Typer) -> None:
    app.command(
        "report",
        help="Write an HTML report (figures embedded) and a Markdown summary of runs/calibrations.",
    )(report)
