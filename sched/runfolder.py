"""Write a run folder (docs/engine.md): ``iterations.parquet``, ``requests.parquet``,
``run.json``, all or nothing.

The folder is written under a temporary name beside the target and renamed into
place, so a crash never leaves a half-written run that a report would pick up.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from servecal.sched.result import RunResult

RUN_FILES = ("run.json", "iterations.parquet", "requests.parquet")


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
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        result.iterations.to_parquet(tmp / "iterations.parquet", index=False)
        result.requests.to_parquet(tmp / "requests.parquet", index=False)
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
