"""``servecal plugins [KIND]``: every extension point's built-in names, in one list."""

from __future__ import annotations

import json
from typing import Any

import typer

from servecal.commands._common import user_errors
from servecal.util.errors import InputError

#: Each kind's registry by import path (imported only when listed) and the
#: option or command that names it.
KINDS = {
    "policy": "servecal.sched.policies.registry:POLICIES",
    "router": "servecal.sched.policies.registry:ROUTERS",
    "truth": "servecal.sched.experiment.models:TRUTHS",
    "predictor": "servecal.sched.experiment.models:PREDICTORS",
    "importer": "servecal.profiler.importer_registry:IMPORTERS",
    "exporter": "servecal.costmodels.export:EXPORTERS",
    "fit-model": "servecal.costmodels.candidates:CANDIDATES",
    "power-model": "servecal.sched.power:POWER_MODELS",
    "run-backend": "servecal.sched.experiment.run:RUNNERS",
    "sweep-pool": "servecal.sched.experiment.sweep:POOLS",
    "job-backend": "servecal.profiler.jobs:BACKENDS",
    "energy-meter": "servecal.integrations.vllm.energy:ENERGY_METERS",
}


def kind_listing(kind: str) -> dict[str, Any]:
    """One kind's names: ``{kind, flag, contract, user_form, entries: [{name, usage,
    summary, ...}]}`` (a policy's or router's entries add backends and options)."""
    if kind not in KINDS:
        raise InputError(f"unknown plugin kind {kind!r}; choose {', '.join(KINDS)}")
    from servecal.plugins import load_object

    registry = load_object(KINDS[kind])
    return {
        "kind": kind,
        "flag": registry.flag,
        "contract": registry.contract,
        "user_form": registry.user_form,
        "entries": registry.listing(),
    }


@user_errors
def plugins_command(
    kind: str = typer.Argument(None, help=f"One kind: {', '.join(KINDS)} [default: all]."),
    as_json: bool = typer.Option(False, "--json", help="Print the list as JSON."),
) -> None:
    """List the built-in names of every extension point; each also loads MODULE:ATTR."""
    kinds = list(KINDS) if kind is None else [kind]
    docs = [kind_listing(k) for k in kinds]
    if as_json:
        typer.echo(json.dumps(docs))
        return
    for i, doc in enumerate(docs):
        if i:
            typer.echo("")
        user = f", or {doc['user_form']}" if doc["user_form"] else ""
        typer.echo(f"{doc['kind']} ({doc['flag']} NAME{user}: {doc['contract']})")
        for e in doc["entries"]:
            typer.echo(f"  {e['usage']:<28} {e['summary']}")
            if e.get("options"):  # a policy's or router's typed options (--opt KEY=VALUE)
                typer.echo(f"  {'':<28}   options: {', '.join(e['options'])}")


def register(app: typer.Typer) -> None:
    app.command("plugins", help="List every extension point's names (policies, truths, ...).")(
        plugins_command
    )
