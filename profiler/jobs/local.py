"""Run jobs on this host: worker processes, with CPUs and visible GPUs as the resources.

Every job runs in a spawned worker process (never in the driver), so a job that
crashes, leaks GPU memory or is killed by the kernel takes only itself down:

* CPU jobs (``num_gpus = 0``) share a pool of long-lived workers, which see no GPU
  (``CUDA_VISIBLE_DEVICES`` empty): many short jobs pay the start-up once per worker;
* GPU jobs get a fresh worker each, started with ``CUDA_VISIBLE_DEVICES`` set to the
  devices they were given (by UUID, so the driver's and the job's numbering cannot
  disagree), which exits when the job ends and so hands its memory back.

A job starts when its resources are free (jobs are tried in order; a later job that
fits starts before an earlier one that does not). Ctrl-C reaches the driver and
the workers alike: workers ignore it except while a job installs its own handler
(``calibrate`` does: it stops between repeat rounds and keeps what it measured),
and the driver collects what comes back within ``grace_s`` before re-raising.
A worker whose driver is gone gets SIGTERM, so an orphan stops as if interrupted.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from typing import Any

from servecal.profiler.jobs.base import (
    BackendUnavailable,
    Job,
    JobResult,
    Progress,
    Resources,
    describe_worker,
    drive,
    execute,
    one_line,
)

#: Seconds between the orphan checks of a worker.
PARENT_POLL_S = 1.0


@dataclass(frozen=True)
class Gpu:
    """One visible device: NVML index, UUID (what the job's ``CUDA_VISIBLE_DEVICES`` gets), name."""

    index: int
    uuid: str
    name: str


def _matches(kind: str, name: str) -> bool:
    """Whether a device ``name`` is of ``kind`` (``"H100"`` in ``"NVIDIA H100 80GB HBM3"``)."""

    def squash(s: str) -> str:
        return "".join(ch for ch in s.lower() if ch.isalnum())

    return squash(kind) in squash(name)


def visible_gpus() -> list[Gpu]:
    """The NVIDIA devices this process may use (NVML, filtered by ``CUDA_VISIBLE_DEVICES``).

    Uses NVML rather than torch so that the driver never creates a CUDA context
    (its workers would inherit none, but its memory would sit on device 0).
    """
    try:
        import pynvml

        pynvml.nvmlInit()
        found = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            found.append(
                Gpu(
                    i,
                    uuid.decode() if isinstance(uuid, bytes) else uuid,
                    name.decode() if isinstance(name, bytes) else name,
                )
            )
    except Exception:  # noqa: BLE001 - no driver, no NVML, no GPU: all mean "none visible"
        return []
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return found
    chosen: list[Gpu] = []
    for entry in (e.strip() for e in env.split(",")):
        match = [g for g in found if (entry.isdigit() and g.index == int(entry)) or g.uuid == entry]
        if not match:  # CUDA stops at the first entry it cannot use
            break
        chosen.append(match[0])
    return chosen


def _watch_parent(parent_pid: int) -> None:
    """SIGTERM this worker once its driver is gone (a job's handler then stops it cleanly)."""

    def loop() -> None:
        while True:
            time.sleep(PARENT_POLL_S)
            if os.getppid() != parent_pid:
                os.kill(os.getpid(), signal.SIGTERM)
                return

    threading.Thread(target=loop, name="parent-watch", daemon=True).start()


def _worker_main(conn: Connection, env: dict[str, str], parent_pid: int) -> None:
    """A worker's loop: receive ``(key, fn, args, kwargs)``, send back a :class:`JobResult`."""
    os.environ.update(env)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # see the module docstring
    _watch_parent(parent_pid)
    where = {**describe_worker(), "backend": "local"}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        key, fn, args, kwargs = message
        result = execute(key, fn, args, kwargs, where)
        try:
            conn.send(result)
        except Exception as exc:  # noqa: BLE001 - e.g. a value that does not pickle
            conn.send(JobResult(key, None, f"result not sendable: {one_line(exc)}", result.wall_s))


class _Worker:
    """A spawned worker process and the driver's end of its pipe."""

    def __init__(self, ctx: Any, env: dict[str, str], gpus: tuple[Gpu, ...]) -> None:
        self.conn, child = ctx.Pipe()
        self.gpus = gpus
        self.process = ctx.Process(
            target=_worker_main, args=(child, env, os.getpid()), name="servecal-job", daemon=True
        )
        self.process.start()
        child.close()

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the worker to exit; terminate it if it does not within ``timeout``."""
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(None)
        self.process.join(timeout)
        self.kill()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(5.0)
            if self.process.is_alive():
                self.process.kill()
                self.process.join()
        self.conn.close()


@dataclass
class _Running:
    job: Job
    worker: _Worker
    started: float


class LocalBackend:
    """Jobs in worker processes on this host (see the module docstring).

    ``num_cpus``: CPU capacity (default: the cores this process may use);
    ``gpus``: the devices to hand out (default: :func:`visible_gpus`);
    ``grace_s``: how long Ctrl-C waits for running jobs to come back.
    """

    name = "local"

    def __init__(
        self,
        num_cpus: float | None = None,
        gpus: Sequence[Gpu] | None = None,
        grace_s: float = 60.0,
    ) -> None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        self.num_cpus = float(num_cpus if num_cpus is not None else (cores or os.cpu_count() or 1))
        self.gpus = tuple(visible_gpus() if gpus is None else gpus)
        self.grace_s = grace_s
        self._ctx = mp.get_context("spawn")  # no inherited threads, locks or CUDA state
        self._idle: list[_Worker] = []  # CPU workers waiting for their next job

    def capacity(self) -> Resources:
        return Resources(num_cpus=self.num_cpus, num_gpus=len(self.gpus))

    def describe(self) -> str:
        gpus = ", ".join(f"{g.index}: {g.name}" for g in self.gpus) or "none"
        return f"local ({self.num_cpus:g} CPUs; GPUs: {gpus})"

    def infeasible(self, res: Resources) -> str | None:
        """Why a job with ``res`` can never run here (None when it can)."""
        if res.num_cpus > self.num_cpus:
            return f"needs {res.num_cpus:g} CPUs; this host has {self.num_cpus:g}"
        usable = self.of_kind(self.gpus, res.accelerator_type)
        if res.num_gpus > len(usable):
            kind = f" {res.accelerator_type}" if res.accelerator_type else ""
            seen = ", ".join(sorted({g.name for g in self.gpus})) or "none"
            return f"needs {res.num_gpus}{kind} GPU(s); visible here: {len(self.gpus)} ({seen})"
        return None

    @staticmethod
    def of_kind(gpus: Sequence[Gpu], kind: str | None) -> list[Gpu]:
        return [g for g in gpus if kind is None or _matches(kind, g.name)]

    # ------------------------------------------------------------------ running
    def worker_for(self, job: Job, gpus: tuple[Gpu, ...]) -> _Worker:
        if gpus:
            env = {
                "CUDA_VISIBLE_DEVICES": ",".join(g.uuid for g in gpus),
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            }
            return _Worker(self._ctx, env, gpus)
        if self._idle:
            return self._idle.pop()
        # A CPU job must not grab a device it was not given.
        return _Worker(self._ctx, {"CUDA_VISIBLE_DEVICES": ""} if self.gpus else {}, ())

    def result_of(self, run: _Running) -> JobResult:
        """Read a finished worker's result (or turn its death into one)."""
        try:
            result: JobResult = run.worker.conn.recv()
        except (EOFError, OSError):
            run.worker.process.join(5.0)
            code = run.worker.process.exitcode
            why = " (killed: out of memory?)" if code == -signal.SIGKILL else ""
            return JobResult(
                run.job.key,
                None,
                f"worker process died with exit code {code}{why}",
                time.monotonic() - run.started,
                {"backend": "local", "pid": run.worker.process.pid},
            )
        if run.worker.gpus:
            where = dict(result.where)
            where["gpus"] = [str(g.index) for g in run.worker.gpus]  # host numbering, not 0..k-1
            where["gpu_names"] = [g.name for g in run.worker.gpus]
            result = replace(result, where=where)
        return result

    def run(self, jobs: Sequence[Job], progress: Progress | None = None) -> Iterator[JobResult]:
        """Run ``jobs``; yield results as they complete (see the module docstring)."""
        return drive(jobs, progress, _LocalPlacement(self))

    def take_back(self, worker: _Worker) -> None:
        """A worker whose job came back: a CPU worker waits for the next one, a GPU
        worker (or a dead one) is stopped."""
        if worker.gpus or not worker.process.is_alive():
            worker.stop()
        else:
            self._idle.append(worker)

    def close(self) -> None:
        while self._idle:
            self._idle.pop().stop()

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_local(address: str | None = None, **options: Any) -> LocalBackend:
    """The ``local`` job backend (``address`` must be None: it joins no cluster)."""
    if address is not None:
        raise BackendUnavailable("--address is for --backend ray; the local backend has none")
    return LocalBackend(**options)


class _LocalPlacement:
    """One :meth:`LocalBackend.run` call's free CPUs and GPUs and running workers (the
    :class:`~servecal.profiler.jobs.base.Placement` that :func:`drive` runs)."""

    backend = "local"

    def __init__(self, owner: LocalBackend) -> None:
        self.owner = owner
        self.grace_s = owner.grace_s
        self.free_cpus = owner.num_cpus
        self.free_gpus = list(owner.gpus)
        self.running: dict[Connection, _Running] = {}

    def infeasible(self, resources: Resources) -> str | None:
        return self.owner.infeasible(resources)

    def _release(self, run: _Running) -> None:
        self.free_cpus += run.job.resources.num_cpus
        self.free_gpus.extend(run.worker.gpus)
        self.free_gpus.sort(key=lambda g: g.index)
        self.owner.take_back(run.worker)

    def _fits(self, job: Job) -> tuple[Gpu, ...] | None:
        """The GPUs ``job`` would get now, or None when it does not fit yet."""
        res = job.resources
        usable = self.owner.of_kind(self.free_gpus, res.accelerator_type)
        if res.num_cpus > self.free_cpus + 1e-9 or res.num_gpus > len(usable):
            return None
        return tuple(usable[: res.num_gpus])

    def start(self, waiting: deque[Job]) -> list[JobResult]:
        skipped: list[Job] = []
        unsent: list[JobResult] = []
        while waiting:
            if self.free_cpus < 1e-9 and not self.free_gpus:  # full: stop scanning
                break
            job = waiting.popleft()
            gpus = self._fits(job)
            if gpus is None:
                skipped.append(job)
                continue
            for g in gpus:
                self.free_gpus.remove(g)
            self.free_cpus -= job.resources.num_cpus
            worker = self.owner.worker_for(job, gpus)
            run = _Running(job, worker, time.monotonic())
            try:
                worker.conn.send((job.key, job.fn, tuple(job.args), dict(job.kwargs)))
            except Exception as exc:  # noqa: BLE001 - e.g. a lambda: it cannot pickle
                self._release(run)
                error = f"job not sendable to a worker: {one_line(exc)}"
                unsent.append(JobResult(job.key, None, error, 0.0, {"backend": "local"}))
                continue
            self.running[worker.conn] = run
        waiting.extendleft(reversed(skipped))  # they keep their place in the queue
        return unsent

    def busy(self) -> bool:
        return bool(self.running)

    def collect(self, timeout: float | None) -> list[JobResult]:
        out = []
        for conn in wait(list(self.running), timeout):
            run = self.running.pop(conn)  # type: ignore[arg-type]
            result = self.owner.result_of(run)
            self._release(run)
            out.append(result)
        return out

    def interrupt(self) -> None:
        """Nothing to send: Ctrl-C reached the workers too (see the module docstring)."""

    def abandon(self) -> None:
        for run in self.running.values():
            run.worker.kill()
        self.running.clear()
