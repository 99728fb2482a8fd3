"""Shared plumbing for command modules (not a command: names starting with _ are skipped).

:func:`user_errors` is the one place where a user's bad input becomes one line
``error: ...`` and exit code 2 (and Ctrl-C exit code 130): every command
callback is decorated with it, so the same holds under ``typer.testing.CliRunner``
and the shell. :mod:`servecal.cli` does the same for click's own usage errors.
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import typer

from servecal.costmodels.provenance import FingerprintMismatchWarning, TableTrust
from servecal.util.errors import InputError, NoticeWarning

F = TypeVar("F", bound=Callable[..., Any])

#: Exit codes: bad input (or a gate that cannot decide), and interrupted (128 + SIGINT).
EXIT_INPUT = 2
EXIT_INTERRUPTED = 130
#: Warnings shown as one ``warning: ...`` line (each message once per command).
ONE_LINE_WARNINGS = (FingerprintMismatchWarning, NoticeWarning)


def one_line(text: str) -> str:
    """``text`` on one line (a message that spans lines would read as several)."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def describe_error(exc: BaseException) -> str:
    """The one line that says what went wrong, for the error types user input raises."""
    if isinstance(exc, InputError):
        return one_line(str(exc))
    if isinstance(exc, OSError):
        what = exc.strerror or errno.errorcode.get(exc.errno or 0, "") or str(exc)
        where = exc.filename
        if where is None:
            return one_line(f"{what}" if exc.strerror else str(exc))
        other = f" -> {exc.filename2}" if exc.filename2 else ""
        return one_line(f"{where}{other}: {what}")
    if isinstance(exc, OverflowError):
        return one_line(f"a number is too large ({exc})")
    if isinstance(exc, RecursionError):
        return "input nested too deeply (a JSON or TOML file?)"
    return one_line(str(exc) or type(exc).__name__)


#: What :func:`user_errors` turns into one line and exit 2. ValueError covers
#: InputError, and numpy/pandas/json refusing a user's value.
USER_ERRORS = (InputError, OSError, OverflowError, RecursionError, ValueError)


def user_errors(fn: F) -> F:
    """Bad input → one line ``error: ...`` on stderr and exit 2; Ctrl-C → exit 130.

    Decorate every command callback with it (below ``@app.command``'s target).
    Fingerprint warnings and notices (``NoticeWarning``: e.g. a run planned on the
    oracle) print as one ``warning: ...`` line each.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with one_line_warnings():
                return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except KeyboardInterrupt:
            typer.echo("interrupted: what was written so far is kept", err=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except USER_ERRORS as exc:
            typer.echo(f"error: {describe_error(exc)}", err=True)
            raise typer.Exit(EXIT_INPUT) from None

    return wrapper  # type: ignore[return-value]


@contextmanager
def one_line_warnings() -> Iterator[None]:
    """Show :data:`ONE_LINE_WARNINGS` as ``warning: ...`` on stderr, each message once."""
    seen: set[str] = set()
    with warnings.catch_warnings():
        previous = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001
            if not issubclass(category, ONE_LINE_WARNINGS):
                return previous(message, category, filename, lineno, file, line)
            text = one_line(str(message))
            if text not in seen:
                seen.add(text)
                typer.echo(f"warning: {text}", err=True)
            return None

        warnings.showwarning = show
        for category in ONE_LINE_WARNINGS:
            warnings.simplefilter("always", category)  # `seen` does the deduplication
        yield


def writes_folder(param: str = "out", runs: bool = True) -> Callable[[F], F]:
    """Hold the command's output folder (its ``param`` argument) while it runs.

    Put it below :func:`user_errors`. Checks the folder can be written before any
    work; with ``runs``, holds :func:`servecal.sched.runfolder.run_output` (lock,
    stale outputs of the last command there replaced), else only the lock.
    """

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            folder = kwargs.get(param)
            if folder is None:
                return fn(*args, **kwargs)
            writable_folder(Path(folder), f"--{param.replace('_', '-')}")
            command = f"servecal {fn.__name__.removesuffix('_command')}"
            if runs:
                from servecal.sched.runfolder import run_output

                holder = run_output(folder, command)
            else:
                from servecal.util.folders import folder_lock

                holder = folder_lock(folder, command)
            with holder:
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def writable_file(path: Path, flag: str = "--out") -> Path:
    """Check, before any work, that ``path`` can be written as a file; one-line
    :class:`InputError` if not. Creates nothing."""
    from servecal.util.atomic import is_special

    p = Path(path)
    if p.is_dir():
        raise InputError(f"{flag} {p}: is a folder, expected a file")
    if is_special(p):  # a device or FIFO: written in place, never replaced
        if not os.access(p, os.W_OK):
            raise InputError(f"{flag} {p}: cannot write there (permission denied)")
        return p
    if p.is_symlink() and not p.exists():
        raise InputError(f"{flag} {p}: a symbolic link to nothing (servecal will not replace it)")
    real = p.resolve() if p.is_symlink() else p
    _probe(real.parent if str(real.parent) else Path("."), flag, p)
    return p


def output_suffix(path: Path, suffixes: tuple[str, ...], what: str, flag: str = "--out") -> Path:
    """The suffix decides an output's format: refuse a name that would hold another
    format's bytes (``import --out s.csv`` writing Parquet). A device or pipe has no
    suffix to honour and passes."""
    from servecal.util.atomic import is_special

    p = Path(path)
    if is_special(p) or p.suffix.lower() in suffixes:
        return p
    raise InputError(
        f"{flag} {p}: {what} is written as {' or '.join(suffixes)}; "
        f"name the file {p.with_suffix(suffixes[0]).name}"
    )


def writable_folder(path: Path, flag: str = "--out") -> Path:
    """Check, before any work, that ``path`` can be written as a folder. Creates nothing."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError(f"{flag} {p}: exists and is not a folder")
    _probe(p, flag, p)
    return p


def _probe(folder: Path, flag: str, shown: Path) -> None:
    """Write (and remove) a file in ``folder``, or in its nearest existing ancestor when
    it does not exist yet: the only sure test of "can be written" (root ignores modes)."""
    existing = folder
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(f"{flag} {shown}: {existing} is not a folder")
    try:
        fd, tmp = tempfile.mkstemp(dir=existing, prefix=".servecal-probe-")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise InputError(f"{flag} {shown}: cannot write there ({describe_error(exc)})") from None


#: The options of every command that loads cost tables (pass them to :func:`table_trust`).
ALLOW_EDITED_HELP = (
    "Load cost tables whose numbers no longer match their content hash, or that have none."
)
ALLOW_MISMATCH_HELP = (
    "Warn on, instead of refusing (exit 2), a table whose fingerprint (device, model, TP) "
    "is not that of the measurements or truth it meets."
)
STRICT_HELP = "Refuse a fingerprint mismatch even with --allow-mismatch (the default refuses)."


def table_trust(allow_edited: bool, strict: bool, allow_mismatch: bool = False) -> TableTrust:
    """``--allow-edited`` / ``--strict`` / ``--allow-mismatch`` as the one value a
    command hands every loader of its cost tables (a sweep's specs carry it into worker
    processes)."""
    return TableTrust(allow_edited=allow_edited, allow_mismatch=allow_mismatch, strict=strict)


#: Old flag names already warned about in this process (each warns once).
_WARNED_ALIASES: set[str] = set()


def renamed_flag(new_value: Any, old_value: Any, new: str, old: str) -> Any:
    """The value of flag ``new``, also accepted under its old name ``old`` (a hidden
    option) so that scripts written against it keep working.

    Giving ``old`` prints a one-line deprecation note to stderr, once per process;
    giving both with different values is an input error.
    """
    if old_value is None:
        return new_value
    if new_value is not None and new_value != old_value:
        raise InputError(f"{old} is the old name of {new}: give one of them")
    if old not in _WARNED_ALIASES:
        _WARNED_ALIASES.add(old)
        typer.echo(f"note: {old} is deprecated, use {new}", err=True)
    return old_value
