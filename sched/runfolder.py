"""Write a run folder (docs/engine.md): ``iterations.parquet``, ``requests.parquet``,
``run.json``, all or nothing; and own the output folder the runs go into.

The folder is written under a temporary name beside the target (hidden, ending
in ``.tmp``: never counted as a run) and renamed into place, so a crash never
leaves a half-written run that a report would pick up.

:func:`run_output` is what a command holds while it writes runs into ``--out``:
the folder's lock (one writer at a time, :mod:`servecal.util.folders`), and
a record (``.servecal-outputs.json``) of what the command wrote there. When a
later command into the same folder has written its runs, it removes what the
previous one recorded and it did not rewrite or resume (and temporary
leftovers), so a rerun with fewer seeds or other cells never mixes its runs with
stale ones. That clean-up happens only when the command finishes: one that is
interrupted or fails removes nothing and records what it wrote beside what was
there. Folders servecal did not write are never removed or replaced (see
:func:`is_servecal_run`), and a command that wrote nothing changes nothing.

A rerun resumes: :func:`finished_run` finds a run folder already holding the
same run (the same ``config``), which the sweep reuses instead of recomputing;
one holding another configuration is refused unless the command was given
``--force``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from servecal.sched.result import RunResult
from servecal.util.arrow_numpy import write_parquet
from servecal.util.atomic import temporary_folder
from servecal.util.errors import InputError
from servecal.util.folders import folder_lock, make_folder

RUN_FILES = ("run.json", "iterations.parquet", "requests.parquet")
#: What a command recorded of its outputs in a folder (relative paths).
OUTPUTS_FILE = ".servecal-outputs.json"
OUTPUTS_SCHEMA = "servecal.outputs/1"
RUN_SCHEMA = "servecal.run/1"
#: Run folders the command holding :func:`run_output` resumed (kept as its outputs).
_resumed: set[Path] = set()
#: The id of the command holding :func:`run_output` in this process (``None``: none).
_invocation: str | None = None


def current_invocation() -> str | None:
    """The id of the command holding :func:`run_output` in this process: ``write_run``
    stamps it into ``run.json`` (``invocation``) so the command knows its own runs; a
    sweep hands it to worker processes with each task."""
    return _invocation


def _plain(value: Any) -> Any:
    """JSON-safe: NaN/inf → None, numpy scalars → Python numbers, tuples → lists."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def is_servecal_run(folder: Path) -> bool:
    """Whether ``folder`` is a run folder servecal wrote, which servecal may replace
    or remove: a ``run.json`` of a ``servecal.run/`` schema, and nothing in the
    folder but :data:`RUN_FILES` (a file a person put there makes it theirs)."""
    try:
        if folder.is_symlink() or not folder.is_dir():
            return False
        if any(p.name not in RUN_FILES for p in folder.iterdir()):
            return False
        doc = json.loads((folder / "run.json").read_text())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and str(doc.get("schema", "")).startswith("servecal.run/")


def _not_ours(folder: Path) -> InputError:
    return InputError(
        f"{folder} exists and was not written by servecal (it holds other files, or no "
        "servecal run.json): servecal never replaces it; move it away or choose another --out"
    )


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold Ctrl-C (and SIGTERM) back for a few system calls: delivered right after."""
    held = {signal.SIGINT, signal.SIGTERM}
    try:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    except (AttributeError, OSError, ValueError):  # pragma: no cover - not POSIX
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def as_recorded(doc: Any) -> Any:
    """``doc`` as ``run.json`` holds it (JSON: NaN as None, plain numbers, lists)."""
    return json.loads(json.dumps(_plain(doc)))


def write_run(
    folder: str | os.PathLike[str],
    result: RunResult,
    config: dict[str, Any],
    summary: dict[str, Any],
    seeds: dict[str, Any],
    invocation: str | None = None,
) -> Path:
    """Write ``result`` as a run folder at ``folder``, replacing a run folder servecal
    wrote there (:func:`is_servecal_run`); anything else there is refused
    (:class:`InputError`). ``invocation``: the writing command's id (default: this
    process's, :func:`current_invocation`). The old run is renamed away and the new one renamed in
    with Ctrl-C held back, so an interrupt leaves one whole run or the other."""
    target = Path(folder)
    make_folder(target.parent)
    if (target.exists() or target.is_symlink()) and not is_servecal_run(target):
        raise _not_ours(target)
    tmp = temporary_folder(target.parent, target.name)
    old: Path | None = None
    try:
        # numpy → Parquet without pandas (servecal.util.arrow_numpy); nulls as pandas writes them
        _write_iterations(result, tmp / "iterations.parquet")
        write_parquet(dict(result.request_columns), tmp / "requests.parquet")
        doc = {
            "schema": RUN_SCHEMA,
            "config": config,
            "seeds": seeds,
            "summary": summary,
            "energy_source": result.energy_source,
            "plan_calls": result.plan_calls,
            "counters": result.counters,
            "observers": result.observers,
        }
        invocation = invocation or _invocation
        if invocation:
            doc["invocation"] = invocation
        (tmp / "run.json").write_text(json.dumps(_plain(doc), indent=2) + "\n")
        with _signals_held():
            if target.exists():
                old = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.old.tmp"
                os.rename(target, old)
            try:
                os.rename(tmp, target)
            except BaseException:
                if old is not None:  # the new run could not go in: the old one goes back
                    os.rename(old, target)
                    old = None
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return target


def _write_iterations(result: RunResult, path: Path) -> None:
    """The iterations file: a streamed run's (already written as it ran) moved in,
    else written from the columns."""
    from servecal.sched.iteration_stream import StreamedColumns

    columns = result.iteration_columns
    if isinstance(columns, StreamedColumns):
        columns.move_to(path)
    else:
        write_parquet(dict(columns), path)


def _comparable(config: Any) -> Any:
    """``config`` as ``run.json`` holds it, less ``seeds`` (one run is one seed)."""
    plain = as_recorded(config)
    if isinstance(plain, dict):
        plain.pop("seeds", None)
    return plain


def _first_difference(mine: dict[str, Any], theirs: Any) -> str:
    if not isinstance(theirs, dict):
        return "its run.json has no config"
    for key in sorted(set(mine) | set(theirs)):
        if mine.get(key) != theirs.get(key):
            return f"{key} {theirs.get(key)!r} there, {mine.get(key)!r} now"
    return "its run.json differs"


def finished_run(
    folder: str | os.PathLike[str], config: dict[str, Any], force: bool = False
) -> dict[str, Any] | None:
    """The ``run.json`` of a finished run of ``config`` at ``folder`` (to resume), or
    ``None`` when the run must be made (nothing there; with ``force``, a run folder
    servecal wrote of another configuration, to be replaced). Refused
    (:class:`InputError`): a folder servecal did not write (even with ``force``), and,
    without ``force``, a run of another configuration."""
    path = Path(folder)
    if not (path.exists() or path.is_symlink()):
        return None
    if not is_servecal_run(path):
        raise _not_ours(path)
    doc = json.loads((path / "run.json").read_text())
    mine = _comparable(config)
    theirs = _comparable(doc.get("config"))
    complete = doc.get("schema") == RUN_SCHEMA and isinstance(doc.get("summary"), dict)
    if complete and mine == theirs:
        return doc
    if force:
        return None
    why = _first_difference(mine, theirs) if complete else f"schema {doc.get('schema')!r}"
    raise InputError(
        f"{path} holds a finished run of another configuration ({why}): pass --force to "
        "replace the runs there, or choose another --out"
    )


def mark_resumed(folder: str | os.PathLike[str]) -> None:
    """Count a resumed run folder among the outputs of the command holding
    :func:`run_output` (so its clean-up keeps it)."""
    _resumed.add(Path(folder).absolute())


def write_json(path: str | os.PathLike[str], doc: Any) -> None:
    """Write ``doc`` as JSON atomically (NaN as null)."""
    from servecal.util.atomic import atomic_write_bytes

    atomic_write_bytes(path, (json.dumps(_plain(doc), indent=2) + "\n").encode())


def is_temporary(path: Path) -> bool:
    """A writer's temporary (``.NAME.xxxx.tmp``): never a run, removed by the next writer."""
    return path.name.startswith(".") and path.name.endswith(".tmp")


def _run_folders(root: Path) -> Iterator[Path]:
    """Run folders (holding ``run.json``) under ``root``, skipping hidden folders."""
    for here, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        if "run.json" in files:
            dirs[:] = []
            yield Path(here)


def _inside(root: Path, rel: Any) -> Path | None:
    if not isinstance(rel, str) or not rel or os.path.isabs(rel):
        return None
    path = (root / rel).resolve()
    return path if path.is_relative_to(root.resolve()) and path != root.resolve() else None


def remove_temporaries(root: Path) -> int:
    """Remove writers' temporary leftovers under ``root`` (hold the lock); how many went."""
    removed = 0
    for here, dirs, files in os.walk(root):
        for name in [d for d in dirs if is_temporary(Path(d))]:
            shutil.rmtree(Path(here) / name, ignore_errors=True)
            dirs.remove(name)
            removed += 1
        for name in [f for f in files if is_temporary(Path(f))]:
            (Path(here) / name).unlink(missing_ok=True)
            removed += 1
    return removed


def recorded_outputs(root: Path) -> set[str]:
    """What the last command recorded writing into ``root`` (relative paths)."""
    try:
        doc = json.loads((root / OUTPUTS_FILE).read_text())
    except (OSError, ValueError, RecursionError):
        return set()
    paths = doc.get("paths", []) if isinstance(doc, dict) else []
    return {p for p in paths if isinstance(p, str)} if isinstance(paths, list) else set()


def _written_by(run: Path, invocation: str) -> bool:
    try:
        return json.loads((run / "run.json").read_text()).get("invocation") == invocation
    except (OSError, ValueError, RecursionError, AttributeError):
        return False


def fresh_outputs(root: Path, invocation: str, since_ns: int) -> set[str]:
    """Run folders this invocation wrote (``run.json`` says so) or resumed, and
    top-level files written since it started."""
    absolute = root.absolute()
    fresh = {
        str(p.relative_to(root))
        for p in _run_folders(root)
        if _written_by(p, invocation) or (absolute / p.relative_to(root)) in _resumed
    }
    fresh |= {
        p.name
        for p in root.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.stat().st_mtime_ns >= since_ns
    }
    return fresh


def replace_outputs(
    root: Path, previous: set[str], fresh: set[str], command: str, finished: bool = True
) -> int:
    """Remove what the last command wrote and this one did not rewrite (only when this
    one ``finished``: else keep it, and record it beside this one's outputs); record
    this one's outputs. Returns how many stale entries went."""
    removed = 0
    if not finished:
        fresh = fresh | {rel for rel in previous if _inside(root, rel) is not None}
    for rel in sorted(previous - fresh):
        path = _inside(root, rel)
        if path is None:
            continue
        if is_servecal_run(path):
            shutil.rmtree(path)
            removed += 1
        elif path.is_file() and not path.is_symlink():
            path.unlink()
            removed += 1
    write_json(
        root / OUTPUTS_FILE,
        {"schema": OUTPUTS_SCHEMA, "command": command, "paths": sorted(fresh)},
    )
    return removed


@contextlib.contextmanager
def run_output(folder: str | os.PathLike[str], command: str = "servecal") -> Iterator[Path]:
    """Hold ``folder`` for one command that writes runs (see the module docstring).

    The last command's outputs are replaced at the end, and only if this one wrote
    something and finished: a command refused for bad input, or stopped before its
    first run, leaves the folder as it found it (less temporary leftovers); one
    interrupted or failing midway keeps every run there and records its own beside.
    """
    global _invocation
    root = Path(folder)
    with folder_lock(root, command):
        remove_temporaries(root)
        previous = recorded_outputs(root)
        invocation = uuid.uuid4().hex
        saved, _invocation = _invocation, invocation
        since_ns = time.time_ns() - 20_000_000  # a file system clock may lag by a tick
        _resumed.clear()
        finished = False
        try:
            yield root
            finished = True
        finally:
            _invocation = saved
            with contextlib.suppress(OSError), _signals_held():
                fresh = fresh_outputs(root, invocation, since_ns)
                if fresh:
                    replace_outputs(root, previous, fresh, command, finished)
            _resumed.clear()
