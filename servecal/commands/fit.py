"""``servecal fit``: samples → calibrated cost table (JSON)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import typer

from servecal.commands._common import output_suffix, renamed_flag, user_errors, writable_file


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
    family: str = typer.Option(
        None,
        "--family",
        help="Regression family: table | linear | piecewise | lgbm | auto (cross-validate "
        "each, keep the best) [default: auto].",
    ),
    model: str = typer.Option(None, "--model", hidden=True, help="Old name of --family."),
    quantiles: str = typer.Option("0.5,0.99", "--quantiles", help="Quantiles to table."),
    fold_share: float = typer.Option(
        None,
        "--fold-share",
        help="Share of grid points each cross-validation fold holds out (1/K) [default: 0.2].",
    ),
    holdout: float = typer.Option(None, "--holdout", hidden=True, help="Old name of --fold-share."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the held-out split and the models."),
    as_json: bool = typer.Option(
        False, "--json", help="Print one JSON object (model block, metrics, notes, table path)."
    ),
) -> None:
    """Fit a predictor, compile a monotone table, calibrate its margin, print held-out metrics."""
    from rich.console import Console

    from servecal.commands.eval import print_metrics
    from servecal.costmodels import InputError
    from servecal.costmodels.fit import TailWarning, fit_cost_table
    from servecal.costmodels.samples import read_samples

    for flag, given in (("--family", family), ("--model", model)):
        if given is not None and not given.strip():  # an unset shell variable: never auto
            raise InputError(f"{flag} '': empty; leave the flag out for auto")
    family = renamed_flag(family, model, "--family", "--model") or "auto"
    fold_share = renamed_flag(fold_share, holdout, "--fold-share", "--holdout")
    fold_share = 0.2 if fold_share is None else fold_share
    writable_file(output_suffix(out, (".json",), "a cost table"))
    qs = parse_quantiles(quantiles)
    data = read_samples(samples)
    console = Console(stderr=True)
    with warnings.catch_warnings(), console.status("fitting") as status:
        warnings.simplefilter("ignore", TailWarning)  # reported below as a note
        result = fit_cost_table(
            data.frame,
            {"source": str(samples), **data.provenance},
            model=family,
            quantiles=qs,
            fold_share=fold_share,
            seed=seed,
            progress=lambda msg: status.update(msg),
        )
    _loads_back(result.table, samples)
    result.table.save(out)
    if as_json:
        doc = {
            "out": str(out),
            "model": result.table.model,
            "metrics": result.table.validation,
            "notes": list(result.notes),
        }
        typer.echo(json.dumps(doc))
        return
    print_candidates(result.table.model)
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


def print_candidates(model: dict[str, Any]) -> None:
    """One line per candidate: out-of-fold pinball per quantile and its mean (the
    score), P50 MAPE, P_tail+δ coverage and tightness, and seconds; ``*`` = kept."""
    selection = model.get("selection") or {}
    rows = selection.get("candidates", [])
    if not rows:
        return

    def pct(v: float | None) -> str:
        return "    n/a" if v is None else f"{v:7.2%}"

    qs = next((list(r["pinball"]) for r in rows if "pinball" in r), [])
    typer.echo(
        f"candidates ({selection['folds']}-fold cross-validation, same folds; {selection['rule']}):"
    )
    head = "".join(f"{'q=' + q:>9}" for q in qs)
    cols = f"{'score':>9} {'MAPE':>7} {'cover':>7} {'tight':>7} {'fit':>7}"
    typer.echo(f"    {'model':<10}{head}{cols}")
    for r in rows:
        mark = "*" if r["name"] == model["kind"] else " "
        if "skipped" in r:
            typer.echo(f"  {mark} {r['name']:<10}skipped: {r['skipped']}")
            continue
        losses = "".join(f"{r['pinball'][q]:9.4f}" for q in qs)
        typer.echo(
            f"  {mark} {r['name']:<10}{losses}{r['score']:9.4f} {pct(r['p50_mape'])} "
            f"{pct(r['p99_coverage'])} {pct(r['tightness'])} {r['fit_s']:6.1f}s"
        )
    total = sum(r["fit_s"] for r in rows) + selection.get("final_fit_s", 0.0)
    typer.echo(
        f"    (pinball in ms; fit = the candidate's cross-validation; final fit of "
        f"{model['kind']} {selection.get('final_fit_s', 0.0):.1f}s; total {total:.1f}s)"
    )


def _loads_back(table: object, samples: Path) -> None:
    """Refuse (before writing) a fitted table its own loader would refuse: a file that
    ``eval``/``validate``/``simulate`` cannot read is no result."""
    import json

    from servecal.costmodels import CostTable, InputError

    try:
        CostTable.from_json(json.loads(table.dumps()), "the fitted table", allow_edited=True)  # type: ignore[attr-defined]
    except (InputError, ValueError) as exc:
        raise InputError(
            f"{samples}: the fit made a table that does not load ({exc}); too few points "
            "for this model? (add points, or try --model piecewise/gbm)"
        ) from None


def register(app: typer.Typer) -> None:
    app.command("fit", help="Fit samples into a calibrated cost table (JSON).")(fit)
