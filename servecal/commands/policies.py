"""``servecal policies``: every built-in policy, the backends it runs on, its options."""

from __future__ import annotations

import json

import typer

from servecal.commands._common import user_errors


@user_errors
def policies_command(
    as_json: bool = typer.Option(False, "--json", help="Print the list as JSON."),
) -> None:
    """List the built-in policies; a user policy is MODULE:CLASS (docs/policies.md)."""
    from servecal.sched.policies.registry import listing

    rows = listing()
    if as_json:
        typer.echo(json.dumps(rows))
        return
    typer.echo("--policy NAME [--opt KEY=VALUE ...], or --policy MODULE:CLASS (docs/policies.md)")
    for r in rows:
        typer.echo("")
        typer.echo(f"{r['name']}  [{', '.join(r['backends'])}]")
        typer.echo(f"    {r['summary']}")
        if r["fixed"]:
            typer.echo(
                "    set by the name: " + ", ".join(f"{k}={v}" for k, v in r["fixed"].items())
            )
        if r["options"]:
            typer.echo("    options: " + ", ".join(r["options"]))


def register(app: typer.Typer) -> None:
    app.command("policies", help="List the policies, their backends and options.")(policies_command)
