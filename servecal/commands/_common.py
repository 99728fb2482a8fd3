"""Shared plumbing for command modules (not a command: names starting with _ are skipped)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from servecal.costmodels.errors import InputError

F = TypeVar("F", bound=Callable[..., Any])


def user_errors(fn: F) -> F:
    """Turn :class:`InputError` into one line on stderr and exit code 2.

    Decorate every command callback with it (below ``@app.command``'s target), so
    that the same behaviour holds under ``typer.testing.CliRunner`` and the shell.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]
