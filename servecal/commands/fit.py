"""``servecal fit``: samples → calibrated cost table (JSON)."""

from __future__ import annotations

import warnings
from pathlib import Path

import typer

from servecal.commands._common import user_errors, writable_file


def parse_quantiles(text: str) -> list[float]:
    """``"0.5,0.99"`` → ``[0.5, 0.99]`` (InputError on anything else)."""
    from servecal.costmodels import InputError

    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"--quantiles: expected numbers like 0.5,0.99, got '{text}'") from None


@user_errors
def fit(
    samples: Path = typer.Argument(..., help="Samples file (Parquet or CSV)."),
    out: Path = typer.Option(..., "--out", help="Cost table to write (JSON)."),
    model: str = typer.Option("auto", "--model", help="table | linear | lgbm | auto."),
    quantiles: str = typer.Option("0.5,0.99", "--quantiles", help="Quantiles to table."),
    holdout: float = typer.Option(
        0.2, "--holdout", help="Share of grid points each cross-validation fold holds out (1/K)."
    ),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the held-out split and the models."),
) -> None:
    """Fit a predictor, compile a monotone table, calibrate its margin, print held-out metrics."""
    from rich.console import Console

    from servecal.commands.eval import print_metrics
    from servecal.costmodels.fit import TailWarning, fit_cost_table
    from servecal.costmodels.samples import read_samples

    writable_file(out)
    qs = parse_quantiles(quantiles)
    data = read_samples(samples)
    console = Console(stderr=True)
    with warnings.catch_warnings(), console.status("fitting") as status:
        warnings.simplefilter("ignore", TailWarning)  # reported below as a note
        result = fit_cost_table(
            data.frame,
            {"source": str(samples), **data.provenance},
            model=model,
            quantiles=qs,
            holdout=holdout,
            seed=seed,
            progress=lambda msg: status.update(msg),
        )
    result.table.save(out)
    typer.echo(f"model: {result.model} ({result.reason})")
    for note in result.notes:
        typer.echo(f"note: {note}")
    info = result.table.margin_info
    if info is not None:
        typer.echo(
            f"margin: δ = {info.rho:+.4f} × P{info.quantile * 100:g} "
            f"(cross-conformal, out-of-fold scores of {info.calibration_points} points, "
            f"{info.calibration_rows} rows)"
        )
    method = result.table.validation.get("method", "held-out points")
    typer.echo(f"held-out metrics ({method}, each fold against a margin blind to it):")
    print_metrics(result.metrics)
    typer.echo(f"wrote {out}")


def register(app: typer.Typer) -> None:
    app.command("fit", help="Fit samples into a calibrated cost table (JSON).")(fit)
