"""Write a run folder (docs/engine.md): ``iterations.parquet``, ``requests.parquet``,
``run.json``, all or nothing; and own the output folder the runs go into.

The folder is written under a temporary name beside the target (hidden, ending
in ``.tmp``: never counted as a run) and renamed into place, so a crash never
leaves a half-written run that a report would pick up.

:func:`run_output` is what a command holds while it writes runs into ``--out``:
the folder's lock (one writer at a time, :mod:`servecal.costmodels.folders`), and
a record (``.servecal-outputs.json``) of what the command wrote there. When a
later command into the same folder has written its runs, it removes what the
previous one recorded and it did not rewrite (and temporary leftovers), so a
rerun with fewer seeds or other cells never mixes its runs with stale ones;
folders servecal did not write are left alone (so are runs written before the
record existed), and a command that wrote nothing changes nothing.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from servecal.costmodels.arrow_numpy import write_parquet
from servecal.costmodels.atomic import temporary_folder
from servecal.costmodels.folders import folder_lock, make_folder
from servecal.sched.result import RunResult

RUN_FILES = ("run.json", "iterations.parquet", "requests.parquet")
#: What a command recorded of its outputs in a folder (relative paths).
OUTPUTS_FILE = ".servecal-outputs.json"
OUTPUTS_SCHEMA = "servecal.outputs/1"
#: The id of the command writing runs, carried into worker processes; ``write_run``
#: stamps it into ``run.json`` (``invocation``) so the command knows its own runs.
INVOCATION_ENV = "SERVECAL_INVOCATION"


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


def write_run(
    folder: str | os.PathLike[str],
    result: RunResult,
    config: dict[str, Any],
    summary: dict[str, Any],
    seeds: dict[str, Any],
) -> Path:
    """Write ``result`` as a run folder at ``folder`` (replacing one already there)."""
    target = Path(folder)
    make_folder(target.parent)
    tmp = temporary_folder(target.parent, target.name)
    try:
        # numpy → Parquet without pandas (costmodels.arrow_numpy); nulls as pandas writes them
        write_parquet(dict(result.iteration_columns), tmp / "iterations.parquet")
        write_parquet(dict(result.request_columns), tmp / "requests.parquet")
        doc = {
            "schema": "servecal.run/1",
            "config": config,
            "seeds": seeds,
            "summary": summary,
            "energy_source": result.energy_source,
            "plan_calls": result.plan_calls,
            "counters": result.counters,
            "observers": result.observers,
        }
        if os.environ.get(INVOCATION_ENV):
            doc["invocation"] = os.environ[INVOCATION_ENV]
        (tmp / "run.json").write_text(json.dumps(_plain(doc), indent=2) + "\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return target


def write_json(path: str | os.PathLike[str], doc: Any) -> None:
    """Write ``doc`` as JSON atomically (NaN as null)."""
    from servecal.costmodels.atomic import atomic_write_bytes

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
    """Run folders this invocation wrote (``run.json`` says so), and top-level files
    written since it started."""
    fresh = {str(p.relative_to(root)) for p in _run_folders(root) if _written_by(p, invocation)}
    fresh |= {
        p.name
        for p in root.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.stat().st_mtime_ns >= since_ns
    }
    return fresh


def replace_outputs(root: Path, previous: set[str], fresh: set[str], command: str) -> int:
    """Remove what the last command wrote and this one did not rewrite; record this
    one's outputs. Returns how many stale entries went."""
    removed = 0
    for rel in sorted(previous - fresh):
        path = _inside(root, rel)
        if path is None:
            continue
        if path.is_dir() and (path / "run.json").is_file():
            shutil.rmtree(path)
            removed += 1
        elif path.is_file():
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
    something: a command refused for bad input, or stopped before its first run,
    leaves the folder as it found it (less temporary leftovers).
    """
    root = Path(folder)
    with folder_lock(root, command):
        remove_temporaries(root)
        previous = recorded_outputs(root)
        invocation = uuid.uuid4().hex
        saved = os.environ.get(INVOCATION_ENV)
        os.environ[INVOCATION_ENV] = invocation  # worker processes inherit it
        since_ns = time.time_ns() - 20_000_000  # a file system clock may lag by a tick
        try:
            yield root
        finally:
            if saved is None:
                os.environ.pop(INVOCATION_ENV, None)
            else:
                os.environ[INVOCATION_ENV] = saved
            with contextlib.suppress(OSError):
                fresh = fresh_outputs(root, invocation, since_ns)
                if fresh:
                    replace_outputs(root, previous, fresh, command)
