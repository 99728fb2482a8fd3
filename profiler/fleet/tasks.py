"""What one fleet job does on its worker: calibrate (or import) into its own folder.

A job's folder is exactly what ``servecal calibrate --out FOLDER`` writes (``shards/``,
``samples.parquet``, ``samples.fingerprint.json``, ``costtable.json``) plus ``calibrate.log``
(what calibrate printed), the inputs it was handed (``grid.json``, ``model.json``)
and, written last, ``fleet-job.json``: the job's record. A folder with that record
holds a finished job; one with ``shards/plan.json`` and no record is resumed
point by point (calibrate's own resume: measured points are never measured again).
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from servecal.profiler.fleet.plan import JobSpec
from servecal.profiler.jobs import describe_worker
from servecal.util.atomic import atomic_write_bytes

RECORD_FILE = "fleet-job.json"
RECORD_SCHEMA = "servecal.fleet-job/1"
LOG_FILE = "calibrate.log"


def read_record(folder: str | Path) -> dict[str, Any] | None:
    """A finished job's record, or None (no record, or an unreadable one: not finished)."""
    try:
        record = json.loads((Path(folder) / RECORD_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("schema") == RECORD_SCHEMA else None


def _plain(value: Any) -> Any:
    """JSON for numpy scalars (``json.dumps`` default)."""
    return value.item() if hasattr(value, "item") else str(value)


def _write_json(path: Path, body: Mapping[str, Any]) -> None:
    text = json.dumps(body, indent=1, sort_keys=True, default=_plain) + "\n"
    atomic_write_bytes(path, text.encode())


def _finish(spec: JobSpec, folder: Path, started: float, body: dict[str, Any]) -> dict[str, Any]:
    record = {
        "schema": RECORD_SCHEMA,
        "job": spec.name,
        "identity": spec.identity(),
        "identity_hash": spec.identity_hash,
        "status": "ok",
        "samples": "samples.parquet",
        "table": "costtable.json",
        "where": describe_worker(),
        "wall_s": time.monotonic() - started,
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **body,
    }
    _write_json(folder / RECORD_FILE, record)  # last: its presence means "finished"
    return json.loads(json.dumps(record, default=_plain))


def _calibrate(cfg: Any, log: IO[str], layouts: Mapping[str, Callable[[], Any]]) -> Any:
    """The fleet's one call into the profiler: calibrate's notices go to the job's log."""
    from servecal.profiler.calibrate import calibrate

    def note(line: str) -> None:
        log.write(line + "\n")
        log.flush()

    return calibrate(cfg, layouts=layouts, on_message=note)


def calibration_job(
    spec: JobSpec, folder: str, layouts: Mapping[str, Callable[[], Any]] | None = None
) -> dict[str, Any]:
    """Calibrate ``spec`` into ``folder`` (resuming it when a run was started there).

    Returns the job's record (``status`` ``"ok"``), or ``{"status": "interrupted"}``
    when a stop signal ended the sweep (what was measured stays for the next run).
    """
    from servecal.profiler.calibrate import CalibrateConfig
    from servecal.profiler.shards import ShardStore

    started = time.monotonic()
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    grid_path = None
    if spec.grid is not None:
        grid_path = out / "grid.json"
        _write_json(grid_path, spec.grid)
    model_path = out / "model.json"
    _write_json(model_path, spec.shape)  # the shape itself: a worker needs no shape file
    cfg = CalibrateConfig(
        out=out,
        device="cpu" if spec.on_cpu else "cuda",
        model=str(model_path),
        budget_s=spec.budget,
        repeats=spec.repeats,
        grid=None if grid_path is None else str(grid_path),
        layers=spec.layers,
        dtype=spec.dtype,
        threads=spec.threads,
        seed=spec.seed,
        block=spec.block,
        resume=ShardStore(out).exists(),
        fit=True,
        kv_layout=spec.kv_layout,
        tp=spec.tp,
    )
    with open(out / LOG_FILE, "a", encoding="utf-8") as log:
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        log.write(f"--- {stamp} {'resume' if cfg.resume else 'start'} on {describe_worker()}\n")
        log.flush()
        result = _calibrate(cfg, log, layouts or {})
    if result.outcome.stopped_by == "signal":
        return {"status": "interrupted", "points_measured": result.points}
    prov = result.provenance
    return _finish(
        spec,
        out,
        started,
        {
            "stopped_by": result.outcome.stopped_by,
            "points_measured": result.points,
            "points_planned": prov.get("points_planned"),
            "rows": result.rows,
            "metrics": result.metrics,
            "fingerprint": prov,
        },
    )


def import_job(spec: JobSpec, folder: str) -> dict[str, Any]:
    """Compose ``spec``'s operator profile into samples and fit a (P50-only) table."""
    from servecal.costmodels.fit import TailWarning, fit_cost_table
    from servecal.costmodels.samples import write_samples
    from servecal.profiler.design import Grid
    from servecal.profiler.importers import import_profile
    from servecal.profiler.shapes import ModelShape

    started = time.monotonic()
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    grid = None if spec.grid is None else Grid.from_dict(spec.grid)
    frame, prov = import_profile(spec.source, spec.path, ModelShape(**spec.shape), spec.tp, grid)
    write_samples(frame, out / "samples.parquet", prov)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TailWarning)  # medians only is what an import is
        fitted = fit_cost_table(frame, prov)
    fitted.table.save(out / "costtable.json")
    points = int(frame.groupby(["n_decode", "chunk", "ctx", "prefix"]).ngroups)
    return _finish(
        spec,
        out,
        started,
        {
            "stopped_by": "complete",
            "points_measured": points,
            "points_planned": points,
            "rows": len(frame),
            "metrics": fitted.metrics,
            "fingerprint": prov,
        },
    )
