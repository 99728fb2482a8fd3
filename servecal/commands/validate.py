"""``servecal validate``: does a cost table still hold? A deployment gate (exit 0 / 1 / 2).

The verdict comes from :mod:`servecal.costmodels.drift.gate` (docs/validate.md):
``valid`` (exit 0), ``drifted`` (exit 1), or ``undecided`` (exit 2, "measure
more": the verdict would flip with one row removed, or the median shift or coverage
lies beyond the promise while no test can confirm it). Anything that cannot be checked at all (no
table, no rows inside its grid, too few grid points, bad input) is one line
``error: ...`` and exit 2. Text and ``--json`` carry the same verdict.
"""

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

#: Exit code per verdict.
EXIT = {"valid": 0, "drifted": 1, "undecided": 2}
#: Regions listed in the text verdict (moved ones first).
SHOW_REGIONS = 8


@user_errors
def validate(
    table: Path = typer.Argument(..., help="Cost table (JSON) to check."),
    measurements: Path = typer.Argument(
        ..., help="New measurements: a samples file (Parquet/CSV) or a run folder."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the verdict as JSON."),
    min_shift: float = typer.Option(
        0.05, "--min-shift", help="Tolerated relative change of the median (either way)."
    ),
    false_alarm: float = typer.Option(
        0.01, "--false-alarm", help="Bound on the chance of 'drifted' for a table that holds."
    ),
    strict: bool = typer.Option(False, "--strict", help=STRICT_HELP),
    allow_edited: bool = typer.Option(False, "--allow-edited", help=ALLOW_EDITED_HELP),
    allow_mismatch: bool = typer.Option(False, "--allow-mismatch", help=ALLOW_MISMATCH_HELP),
) -> None:
    """Check measurements against a table: valid (exit 0), drifted (1), cannot decide (2)."""
    trust = table_trust(allow_edited, strict, allow_mismatch)
    from servecal.costmodels import CostTable, InputError
    from servecal.costmodels.drift.gate import GateConfig
    from servecal.costmodels.drift.replay import (
        CannotDecide,
        load_measurements,
        measured_fingerprint,
        replay,
    )
    from servecal.costmodels.provenance import compare_fingerprints

    try:
        config = GateConfig(min_shift=min_shift, false_alarm=false_alarm)
    except ValueError as exc:
        flag = "--min-shift" if "min_shift" in str(exc) else "--false-alarm"
        raise InputError(f"{flag}: {exc}") from None
    cost_table = CostTable.load(table, trust=trust)
    frame, kind = load_measurements(measurements)
    mismatch = compare_fingerprints(
        cost_table.fingerprint,
        measured_fingerprint(measurements),
        str(table),
        str(measurements),
        trust.refuse_mismatch,
    )
    table_doc = {"path": str(table), "content_hash": cost_table.content_hash()}
    try:
        result = replay(cost_table, frame, kind, config=config)
    except CannotDecide as exc:
        if not as_json:
            raise
        doc = {"verdict": "undecided", "reason": str(exc), "rows": len(frame), "kind": kind,
               "table": table_doc, "fingerprint_mismatch": mismatch}  # fmt: skip
        typer.echo(json.dumps(doc, indent=1))
        raise typer.Exit(EXIT["undecided"]) from None
    result["table"] = table_doc
    result["fingerprint_mismatch"] = mismatch
    typer.echo(json.dumps(result, indent=1) if as_json else text(result))
    raise typer.Exit(EXIT[result["verdict"]])


def _pct(value: float | None, digits: int = 2) -> str:
    return "n/a (no tail)" if value is None else f"{value:.{digits}%}"


def text(r: dict[str, Any]) -> str:
    """The verdict for a person: the same numbers ``--json`` prints."""
    from servecal.costmodels.drift.replay import plural

    out = r["outside_domain"]
    lines = [
        f"verdict: {r['verdict']}",
        f"checked: {r['checked']} of {r['rows']} rows ({r['checked_share']:.1%}, {r['kind']}) "
        f"on {r['points']} {plural(r['unit'])}; {out['rows']} beyond the table's grid",
        f"median shift: ×{r['factor']:.3f} (tolerated ±{r['min_shift']:.0%}); "
        f"false-alarm bound {r['false_alarm_bound']:.0%} per call",
        "coverage (actual <= P99 + margin): n/a (a median-only table has no tail)"
        if r["coverage"] is None
        else f"coverage (actual <= P99 + margin): {_pct(r['coverage'])} "
        f"(promised {_pct(r['coverage_promised'], 0)})",
    ]
    for t in r["tests"]:
        flag = "REJECTED" if t["rejected"] else "ok"
        lines.append(f"test {_test_text(t, plural(r['unit']))}, p = {t['p_value']:.2g}: {flag}")
    for reg in r["regions"][:SHOW_REGIONS]:
        cov = "" if reg["coverage"] is None else f"coverage {reg['coverage']:.1%}, "
        lines.append(
            f"  region {reg['region']}: {reg['status']}, ×{reg['factor']:.3f}, {cov}"
            f"{reg['points']} {plural(r['unit'])}, {reg['rows']} rows"
        )
    if len(r["regions"]) > SHOW_REGIONS:
        lines.append(f"  ... {len(r['regions']) - SHOW_REGIONS} more regions (--json lists all)")
    stab = r["stability"]
    lines.append(
        "stability: no single row's removal changes the verdict"
        if stab["stable"]
        else f"stability: removing row {stab['flipping_rows'][0]} flips the verdict"
    )
    lines.append(r["recommendation"])
    return "\n".join(lines)


def _test_text(t: dict[str, Any], units: str) -> str:
    """One test of the family: its name and what it counted."""
    if t["test"] == "tail":
        return f"tail: exceedance {t['exceed_rate']:.2%} (rejects at {t['critical']:.2%})"
    if t["scope"] == "each point":
        return (
            f"{t['test']}, each point alone: {t['rejected_points']} of {t['points']} {units} "
            f"reject ({t['method']}; the first rejects at p <= {t['critical']:.2g})"
        )
    if t["scope"] == "half-spaces":
        return (
            f"{t['test']}, pooled rows of {t['points']} half-spaces: best {t['region']} "
            f"({t['rows']} rows; rejects at p <= {t['critical']:.2g})"
        )
    return (
        f"{t['test']}: {t['votes']} of {t['points']} {units} past the tolerance "
        f"(rejects at {t['critical']})"
    )


def register(app: typer.Typer) -> None:
    app.command(
        "validate",
        help="Check new measurements against a cost table: valid (exit 0), drifted (1), "
        "cannot decide (2).",
    )(validate)
