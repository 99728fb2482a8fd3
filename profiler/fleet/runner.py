"""Run a fleet plan on a job backend: skip finished jobs, resume partial ones, index results.

For each job of the plan, in order:

* its folder holds a finished record for the same measurement → kept (not rerun);
* a finished record for a *different* measurement (the plan entry changed what it
  measures) → failed with a line saying so (the folder is never overwritten);
* tensor parallelism this calibrate lacks, or resources no node has → failed, not run;
* otherwise → submitted; calibrate resumes the folder's shards if a run began there.

Each result updates ``index.json`` at once (atomically), and a finished job's rows
are written into the combined dataset, so killing the driver loses no finished job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecal.profiler.fleet import dataset
from servecal.profiler.fleet.index import FleetIndex, job_folder
from servecal.profiler.fleet.plan import FleetPlan, JobSpec, fingerprint_mismatches
from servecal.profiler.fleet.tasks import (
    calibration_job,
    import_job,
    read_record,
)
from servecal.profiler.jobs import Backend, Job, JobResult, Resources, one_line
from servecal.util.errors import InputError

#: Called once before any job runs: names of jobs to run, kept (finished before), failed.
OnStart = Callable[[list[str], list[str], dict[str, str]], None]
#: Called after each job's result is indexed: (name, index entry, done, total to run).
OnJob = Callable[[str, dict[str, Any], int, int], None]


@dataclass
class FleetOutcome:
    """What a run of the plan did; the index holds the details."""

    index: Path
    ran: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    interrupted: list[str] = field(default_factory=list)
    dataset_rows: int = 0


def resources_for(spec: JobSpec, capacity: Resources) -> Resources:
    """What a job holds: a CPU calibration owns a whole node (timings need a quiet host);
    a GPU calibration holds ``tp`` GPUs of its type and one CPU; an import one CPU."""
    if spec.kind == "import":
        return Resources(num_cpus=spec.cpus or 1.0)
    if spec.on_cpu:
        return Resources(num_cpus=spec.cpus or max(1.0, capacity.num_cpus))
    return Resources(
        num_cpus=spec.cpus or 1.0, num_gpus=spec.tp, accelerator_type=spec.accelerator_type
    )


def _job(spec: JobSpec, folder: Path, layouts: Mapping[str, Any], capacity: Resources) -> Job:
    if spec.kind == "import":
        return Job(
            spec.name, import_job, (spec, str(folder)), resources=resources_for(spec, capacity)
        )
    return Job(
        spec.name,
        calibration_job,
        (spec, str(folder), dict(layouts)),
        resources=resources_for(spec, capacity),
    )


def _changed(spec: JobSpec, record: Mapping[str, Any]) -> list[str]:
    before = record.get("identity", {})
    now = spec.identity()
    return sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))


def _check_layouts(plan: FleetPlan, layouts: Mapping[str, Any]) -> None:
    """A KV layout no worker could build is a plan error, found before anything runs."""
    from servecal.profiler.calibrate import BUILTIN_LAYOUTS

    known = [*BUILTIN_LAYOUTS, *layouts]
    for spec in plan.jobs:
        if spec.kind == "calibrate" and spec.kv_layout not in (None, *known):
            raise InputError(
                f"{plan.path}: job {spec.name}: kv_layout {spec.kv_layout!r} is not one of "
                f"{', '.join(known)}"
            )


class _Run:
    """One run of a plan: the index being built and what each result does to it."""

    def __init__(self, plan: FleetPlan, root: Path, backend: Backend) -> None:
        self.plan, self.root, self.backend = plan, root, backend
        self.index = FleetIndex(root, plan, backend.describe())
        self.outcome = FleetOutcome(self.index.path)

    def keep(self, spec: JobSpec, record: Mapping[str, Any]) -> None:
        """Index a job finished by an earlier run (and make sure its rows are in the dataset)."""
        self._index_finished(spec, record, dict(record.get("where", {})))
        self.outcome.kept.append(spec.name)

    def fail(self, spec: JobSpec, error: str, **values: Any) -> dict[str, Any]:
        self.outcome.failed.append(spec.name)
        return self.index.update(spec.name, status="failed", error=error, **values)

    def _index_finished(
        self, spec: JobSpec, record: Mapping[str, Any], where: dict[str, Any]
    ) -> dict[str, Any]:
        folder = job_folder(self.root, spec)
        rel = self.index.jobs[spec.name]["folder"]
        target = dataset.partition_path(self.root, spec)
        if not target.exists():
            dataset.write_partition(
                self.root, spec, folder / record.get("samples", "samples.parquet")
            )
        fp = record.get("fingerprint") or {}
        return self.index.update(
            spec.name,
            status="ok",
            error=None,
            table=f"{rel}/{record.get('table', 'costtable.json')}",
            samples=f"{rel}/{record.get('samples', 'samples.parquet')}",
            dataset=str(target.relative_to(self.root)),
            fingerprint=fp,
            fingerprint_mismatch=fingerprint_mismatches(spec, fp),
            metrics=record.get("metrics", {}),
            points_measured=record.get("points_measured"),
            points_planned=record.get("points_planned"),
            rows=record.get("rows"),
            stopped_by=record.get("stopped_by"),
            wall_s=record.get("wall_s"),
            where=where,
            finished=record.get("finished"),
        )

    def result(self, spec: JobSpec, result: JobResult) -> dict[str, Any]:
        """Index one result that came back from the backend."""
        value = result.value if isinstance(result.value, dict) else {}
        where = {**(value.get("where") or {}), **result.where}  # the backend's view wins
        folder = job_folder(self.root, spec)
        if not result.ok:
            if result.detail:
                folder.mkdir(parents=True, exist_ok=True)
                with open(folder / "error.log", "a", encoding="utf-8") as log:
                    log.write(result.detail)
            return self.fail(spec, result.error or "failed", where=where, wall_s=result.wall_s)
        if value.get("status") == "interrupted":
            self.outcome.interrupted.append(spec.name)
            measured = value.get("points_measured")
            return self.index.update(
                spec.name,
                status="interrupted",
                where=where,
                wall_s=result.wall_s,
                points_measured=measured,
            )
        record = read_record(folder)
        if record is None:  # the job wrote on a disk this driver does not see
            return self.fail(
                spec,
                f"finished on {where.get('host', '?')}, but {folder} is not visible here: "
                "--out must be on a filesystem every node shares",
                where=where,
            )
        self.outcome.ran.append(spec.name)
        return self._index_finished(spec, record, where)


def _kept_or_refused(
    run: _Run, spec: JobSpec, folder: Path, backend: Backend, capacity: Resources
) -> str | None:
    """Keep a job that finished earlier with this plan entry (``run.keep``); else why it
    cannot run (another entry finished there, no node can hold it); ``None``: run it."""
    record = read_record(folder)
    if record is not None and record.get("identity_hash") == spec.identity_hash:
        try:
            run.keep(spec, record)
        except Exception as exc:  # noqa: BLE001 - e.g. its samples were deleted
            return f"finished earlier, but unreadable now: {one_line(exc)}"
        return None
    if record is not None:
        return (
            f"{folder} finished with a different plan entry (changed: "
            f"{', '.join(_changed(spec, record))}); rename the job or remove its folder"
        )
    return backend.infeasible(resources_for(spec, capacity))


def run_fleet(
    plan: FleetPlan,
    out: str | Path,
    backend: Backend,
    layouts: Mapping[str, Callable[[], Any]] | None = None,
    on_start: OnStart | None = None,
    on_job: OnJob | None = None,
) -> FleetOutcome:
    """Run (or resume) ``plan`` into the fleet folder ``out`` on ``backend``.

    ``layouts``: KV layouts the jobs may name beyond the profiler's own (the CLI adds
    the torch executor's ``paged``). Ctrl-C: results that come back within the
    backend's grace period are indexed, then ``KeyboardInterrupt`` propagates.
    """
    _check_layouts(plan, layouts or {})
    root = Path(out)
    (root / "jobs").mkdir(parents=True, exist_ok=True)
    run = _Run(plan, root, backend)
    capacity = backend.capacity()
    todo: list[Job] = []
    refused: dict[str, str] = {}
    for spec in plan.jobs:
        folder = job_folder(root, spec)
        reason = _kept_or_refused(run, spec, folder, backend, capacity)
        if reason is not None:
            refused[spec.name] = reason
            run.fail(spec, reason)
        elif spec.name not in run.outcome.kept:
            todo.append(_job(spec, folder, layouts or {}, capacity))
    run.index.write()
    if on_start is not None:
        on_start([j.key for j in todo], list(run.outcome.kept), refused)

    def progress(result: JobResult, done: int, total: int) -> None:
        spec = plan.job(result.key)
        try:
            entry = run.result(spec, result)
        except Exception as exc:  # noqa: BLE001 - e.g. unreadable samples: this job fails
            entry = run.fail(spec, f"indexing its result failed: {one_line(exc)}")
        run.index.write()
        if on_job is not None:
            on_job(result.key, entry, done, total)

    results = backend.run(todo, progress=progress)
    try:
        for _ in results:
            pass
    finally:
        close = getattr(results, "close", None)
        if close is not None:  # a generator: stops its workers if we leave early
            close()
        run.index.write()
        finished = [plan.job(n) for n in run.index.names("ok")]
        dataset.prune(root, finished)
    run.outcome.dataset_rows = sum(int(run.index.jobs[s.name]["rows"] or 0) for s in finished)
    return run.outcome
