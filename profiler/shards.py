"""Append-only, crash-safe storage of a sweep in progress: one shard per finished point.

Layout under ``DIR/shards/``:

* ``plan.json``: what the run measures (model, device, grid, seed, the ordered
  point list); written once when a run starts, read by ``--resume``;
* ``p00042.parquet``: the rows of design point 42 (its index in the plan);
* ``p00042.infeasible.json``: point 42 did not fit (out of memory), and why.

Each shard is written to a temporary name and renamed, so a kill leaves either a
whole shard or none: a point is never half-recorded, and ``--resume`` measures
exactly the points without a shard, so none is lost or repeated.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from servecal.profiler.design import Point
from servecal.util.atomic import atomic_path, atomic_write_bytes
from servecal.util.errors import InputError
from servecal.util.folders import folder_lock

PLAN_SCHEMA = "servecal.calibration-plan/1"
_SHARD = re.compile(r"p(\d{5})\.(parquet|infeasible\.json)")


#: Keys every plan holds (``kv_layout`` and ``tp`` have defaults: older plans lack them).
PLAN_KEYS = ("device", "dtype", "grid", "layers_timed", "points", "repeats", "seed", "shape",
             "warmup")  # fmt: skip


class ShardStore:
    """The ``shards/`` folder of one calibration run."""

    def __init__(self, out_dir: str | Path) -> None:
        self.out = Path(out_dir)
        self.root = self.out / "shards"

    @contextmanager
    def locked(self) -> Iterator[ShardStore]:
        """Hold the calibration folder's lock: two runs (two ``--resume`` too) on one
        folder would write each other's shards; the second stops naming the first."""
        with folder_lock(self.out, "servecal calibrate"):
            yield self

    @property
    def plan_path(self) -> Path:
        return self.root / "plan.json"

    def exists(self) -> bool:
        return self.plan_path.exists()

    def write_plan(self, plan: dict[str, Any]) -> None:
        body = {"schema": PLAN_SCHEMA, **plan}
        atomic_write_bytes(self.plan_path, (json.dumps(body, indent=1) + "\n").encode())

    def read_plan(self) -> dict[str, Any]:
        try:
            plan = json.loads(self.plan_path.read_text())
        except FileNotFoundError:
            raise InputError(f"{self.plan_path}: no run to resume here") from None
        except (OSError, ValueError, RecursionError) as exc:
            raise InputError(f"{self.plan_path}: unreadable plan ({type(exc).__name__})") from None
        if not isinstance(plan, dict) or plan.get("schema") != PLAN_SCHEMA:
            raise InputError(f"{self.plan_path}: not a {PLAN_SCHEMA} file")
        missing = [k for k in PLAN_KEYS if k not in plan]
        if missing:
            raise InputError(
                f"{self.plan_path}: damaged plan, missing {', '.join(missing)}; "
                "start again with another --out (or remove the folder)"
            )
        if not isinstance(plan["shape"], dict) or not isinstance(plan["points"], list):
            raise InputError(f"{self.plan_path}: damaged plan, 'shape' or 'points' malformed")
        return plan

    def discard_plan(self) -> None:
        """Remove a plan nothing was measured under (and ``shards/`` if then empty): a
        run that could not start leaves no calibration to resume."""
        self.plan_path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.root.rmdir()

    def _path(self, index: int, kind: str) -> Path:
        return self.root / f"p{index:05d}.{kind}"

    def done(self) -> dict[int, str]:
        """Index → ``"ok"`` or ``"infeasible"`` for every point with a shard."""
        status: dict[int, str] = {}
        if not self.root.is_dir():
            return status
        for path in self.root.iterdir():
            m = _SHARD.fullmatch(path.name)
            if m:
                status[int(m.group(1))] = "ok" if m.group(2) == "parquet" else "infeasible"
        return status

    def write_rows(self, index: int, rows: list[dict[str, Any]]) -> None:
        with atomic_path(self._path(index, "parquet")) as tmp:
            pd.DataFrame(rows).to_parquet(tmp, index=False)

    def write_infeasible(self, index: int, point: Point, reason: str) -> None:
        body = {"point": [point.n_decode, point.chunk, point.ctx, point.prefix], "reason": reason}
        atomic_write_bytes(self._path(index, "infeasible.json"), json.dumps(body).encode())

    def clean_temporaries(self) -> int:
        """Remove temporary files a killed run left behind; return how many."""
        if not self.root.is_dir():
            return 0
        stale = [p for p in self.root.iterdir() if p.name.startswith(".") and p.suffix == ".tmp"]
        for p in stale:
            p.unlink(missing_ok=True)
        return len(stale)

    def frame(self) -> pd.DataFrame:
        """All measured rows, in plan order (empty frame when nothing is measured)."""
        parts = [
            pd.read_parquet(self._path(i, "parquet"))
            for i, s in sorted(self.done().items())
            if s == "ok"
        ]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

    def infeasible(self) -> list[dict[str, Any]]:
        return [
            json.loads(self._path(i, "infeasible.json").read_text())
            for i, s in sorted(self.done().items())
            if s == "infeasible"
        ]
