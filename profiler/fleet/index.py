"""``DIR/index.json``: one entry per job of the plan, rewritten atomically after every result.

Entry keys: ``kind``, ``device``, ``model``, ``tp``, ``status`` (``ok``, ``failed``,
``interrupted``, ``pending``), ``error`` (one line, or null), ``folder`` (relative
to DIR), ``table`` and ``samples`` (relative paths, null until finished), ``dataset``
(the job's file in ``samples/``), ``fingerprint`` (the full provenance),
``fingerprint_mismatch`` (where it disagrees with the plan), ``metrics`` (held-out,
from the fit), ``points_measured``/``points_planned``, ``rows``, ``stopped_by``,
``wall_s``, ``where`` (backend, host, pid, GPUs), ``finished`` and ``spec`` (the
resolved plan entry).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from servecal.profiler.fleet.plan import FleetPlan, JobSpec
from servecal.util.atomic import atomic_write_bytes
from servecal.util.errors import InputError

INDEX_FILE = "index.json"
INDEX_SCHEMA = "servecal.fleet-index/1"
JOBS_DIR = "jobs"


def job_folder(root: Path, spec: JobSpec) -> Path:
    return root / JOBS_DIR / spec.name


def new_entry(spec: JobSpec) -> dict[str, Any]:
    return {
        "kind": spec.kind,
        "device": spec.device,
        "model": spec.model,
        "tp": spec.tp,
        "status": "pending",
        "error": None,
        "folder": f"{JOBS_DIR}/{spec.name}",
        "table": None,
        "samples": None,
        "dataset": None,
        "fingerprint": None,
        "fingerprint_mismatch": [],
        "metrics": {},
        "points_measured": None,
        "points_planned": None,
        "rows": None,
        "stopped_by": None,
        "wall_s": None,
        "where": {},
        "finished": None,
        "spec": spec.to_dict(),
    }


class FleetIndex:
    """The index being built for one run of a plan (see the module docstring)."""

    def __init__(self, root: Path, plan: FleetPlan, backend: str) -> None:
        self.root = root
        self.plan = plan
        self.backend = backend
        self.jobs: dict[str, dict[str, Any]] = {spec.name: new_entry(spec) for spec in plan.jobs}

    @property
    def path(self) -> Path:
        return self.root / INDEX_FILE

    def update(self, name: str, **values: Any) -> dict[str, Any]:
        self.jobs[name].update(values)
        return self.jobs[name]

    def names(self, status: str) -> list[str]:
        return [name for name, entry in self.jobs.items() if entry["status"] == status]

    def write(self) -> None:
        body = {
            "schema": INDEX_SCHEMA,
            "plan": str(self.plan.path),
            "backend": self.backend,
            "updated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "reference": self.plan.reference,
            "jobs": self.jobs,
        }
        text = json.dumps(body, indent=1, default=str) + "\n"
        atomic_write_bytes(self.path, text.encode())


def read_index(path: str | Path) -> dict[str, Any]:
    """A fleet ``index.json`` (``InputError`` naming the file when it is not one)."""
    path = Path(path)
    try:
        body = json.loads(path.read_text())
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    except ValueError:
        raise InputError(f"{path}: not valid JSON") from None
    if not is_index(body):
        raise InputError(f"{path}: not a {INDEX_SCHEMA} file")
    return body


def is_index(body: Any) -> bool:
    return (
        isinstance(body, Mapping)
        and body.get("schema") == INDEX_SCHEMA
        and isinstance(body.get("jobs"), Mapping)
    )
