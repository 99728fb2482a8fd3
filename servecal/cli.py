"""The ``servecal`` command line: a thin shell over the four stages.

Commands live in ``servecal/commands/<name>.py``; each parses its flags and calls
one function of a stage. User errors (:class:`InputError`) become one line on
stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

from servecal import __version__, commands
from servecal.costmodels.errors import InputError

app = typer.Typer(
    name="servecal",
    help="Calibrate what one LLM-serving iteration costs; schedule requests under SLOs with it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"servecal {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """Calibrate what one LLM-serving iteration costs, and schedule requests under SLOs."""


for _info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
    if _info.name.startswith("_"):
        continue
    importlib.import_module(f"servecal.commands.{_info.name}").register(app)


def main() -> None:
    """Console entry point: run the app, turning user errors into exit code 2."""
    try:
        app(standalone_mode=True)
    except InputError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
