"""The ``servecal`` command line: a thin shell over the four stages.

Commands live in ``servecal/commands/<name>.py``; each parses its flags and calls
one function of a stage. Commands that load cost tables take ``--allow-edited``
and ``--strict`` (:func:`servecal.commands._common.table_trust`). Every failure a
user can cause ends as one line on stderr: bad input
(:func:`servecal.commands._common.user_errors`) and click's usage errors
(:class:`OneLineGroup`) as ``error: ...`` with exit code 2, Ctrl-C with exit
code 130; never a traceback or a boxed panel.
"""

from __future__ import annotations

import gc
import importlib
import pkgutil
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from servecal import __version__, commands
from servecal.commands._common import (
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    USER_ERRORS,
    describe_error,
    one_line,
)

try:  # typer >= 0.16 vendors (a part of) click; older typer uses the click package
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
except ImportError:  # pragma: no cover - depends on the installed typer
    from click.exceptions import ClickException, NoArgsIsHelpError  # type: ignore[no-redef]


class OneLineGroup(TyperGroup):
    """The root group: usage errors as one line."""

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            rv = super().main(
                args=args,
                prog_name=prog_name,
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
            code = rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
        except NoArgsIsHelpError as exc:
            text = exc.ctx.get_help() if exc.ctx is not None else ""
            if text:
                typer.echo(text)
            code = EXIT_INPUT
        except ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            typer.echo(f"error: {one_line(exc.format_message())}{hint}", err=True)
            code = exc.exit_code
        except typer.Abort:
            typer.echo("interrupted", err=True)
            code = EXIT_INTERRUPTED
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            code = EXIT_INTERRUPTED
        except USER_ERRORS as exc:  # raised outside a command (an option callback)
            typer.echo(f"error: {describe_error(exc)}", err=True)
            code = EXIT_INPUT
        if standalone_mode:
            sys.exit(code)
        return code


HELP = "Calibrate what one LLM-serving iteration costs; schedule requests under SLOs with it."


def _version(value: bool) -> None:
    if value:
        typer.echo(f"servecal {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """Calibrate what one LLM-serving iteration costs, and schedule requests under SLOs."""


def command_modules() -> list[str]:
    """The modules of ``servecal/commands`` that define a command, sorted. Each
    registers one command named as the module, less a trailing ``_`` (``import_``)."""
    found = pkgutil.iter_modules(commands.__path__)
    return sorted(m.name for m in found if not m.name.startswith("_"))


def build_app(modules: list[str] | None = None) -> typer.Typer:
    """The command line with the commands of ``modules`` (default: every command)."""
    built = typer.Typer(
        name="servecal",
        help=HELP,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        cls=OneLineGroup,
    )
    # a callback keeps the app a group even with one command registered (typer runs
    # a lone command without its name otherwise)
    built.callback()(_root)
    for module in command_modules() if modules is None else modules:
        importlib.import_module(f"servecal.commands.{module}").register(built)
    return built


def module_for(args: list[str]) -> str | None:
    """The command module ``args`` invoke (``simulate ...`` -> ``simulate``), or None
    (no command, an option first, or a name no module has: the whole app answers)."""
    if not args or args[0].startswith("-"):
        return None
    known = command_modules()
    for module in (args[0], f"{args[0]}_"):
        if module in known:
            return module
    return None


def __getattr__(name: str) -> Any:
    """``servecal.cli.app``: every command, built on first use (PEP 562)."""
    if name == "app":
        globals()["app"] = built = build_app()
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console entry point (errors and Ctrl-C are handled by :class:`OneLineGroup`).

    Only the command named on the line is imported and turned into click options:
    building all of them is a cost every process would pay for commands it does not run
    (docs/results/2026-12-04-vidur-side-by-side.md).
    """
    module = module_for(sys.argv[1:])
    app = build_app(None if module is None else [module])
    # What is imported by now lives as long as the process: out of the collector's
    # reach, the first full collection of a run does not walk numpy's, pyarrow's and
    # typer's objects (~2% of a 2,000-request simulate's instructions). Only these
    # are frozen: a sweep's runs in this process are collected as usual.
    gc.freeze()
    try:
        app()
    except KeyboardInterrupt:  # between the group's handler and the interpreter's exit
        sys.exit(EXIT_INTERRUPTED)
