"""What a job backend runs and returns: jobs, their resources, results, one-line errors.

A *job* is a picklable function plus its arguments and the resources it needs. A
backend runs many of them and yields one :class:`JobResult` per job as each
completes; a job that raises (or whose process dies) becomes a result with a
one-line ``error`` instead of stopping the others.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from servecal.util.errors import InputError

#: The longest error line a result carries (a traceback's last line can be huge).
MAX_ERROR_CHARS = 400


class BackendUnavailable(InputError):
    """A backend cannot be used here (Ray not installed, no cluster at the address)."""


@dataclass(frozen=True)
class Resources:
    """What one job holds while it runs (Ray's ``num_cpus``/``num_gpus``/``accelerator_type``).

    ``accelerator_type`` pins GPU jobs to one device kind (``"H100"``, ``"A100"``: the
    names Ray derives from the device name); ``None`` takes any GPU.
    """

    num_cpus: float = 1.0
    num_gpus: int = 0
    accelerator_type: str | None = None

    def __post_init__(self) -> None:
        if self.num_cpus < 0 or self.num_gpus < 0:
            raise ValueError(f"resources must be >= 0, got {self}")
        if self.accelerator_type is not None and self.num_gpus < 1:
            raise ValueError("an accelerator_type needs num_gpus >= 1")


@dataclass(frozen=True)
class Job:
    """One unit of work: ``fn(*args, **kwargs)`` run where ``resources`` are free.

    ``fn`` and its arguments must pickle (a module-level function, plain data), and
    ``key`` must be unique within one :meth:`Backend.run` call.
    """

    key: str
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    resources: Resources = Resources()


@dataclass(frozen=True)
class JobResult:
    """What came back for one job: its value, or a one-line error (then ``value`` is None)."""

    key: str
    value: Any = None
    error: str | None = None
    wall_s: float = 0.0
    #: Where it ran: ``host``, ``pid``, ``gpus`` (ids as the job saw them), ``backend``.
    where: Mapping[str, Any] = field(default_factory=dict)
    #: The formatted traceback of a job that raised (for a log; ``error`` is the summary).
    detail: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


#: Called after each result with (result, results so far, jobs in this run).
Progress = Callable[[JobResult, int, int], None]


class Backend(Protocol):
    """Runs jobs where their resources are; see :mod:`servecal.profiler.jobs`."""

    name: str

    def capacity(self) -> Resources:
        """The largest single placement: the resources of the biggest node (or this host)."""
        ...

    def infeasible(self, resources: Resources) -> str | None:
        """Why a job asking for ``resources`` can never be placed (None when it can)."""
        ...

    def describe(self) -> str:
        """One line: the backend and what it has (for logs and the fleet index)."""
        ...

    def run(self, jobs: Sequence[Job], progress: Progress | None = None) -> Iterator[JobResult]:
        """Run every job; yield each result as it completes (order of completion)."""
        ...

    def close(self) -> None:
        """Release workers (and a cluster this backend started)."""
        ...

    def __enter__(self) -> Backend: ...

    def __exit__(self, *exc: object) -> None: ...


class Placement(Protocol):
    """One :meth:`Backend.run` call's view of where jobs run: what :func:`drive` asks
    of a backend (the local one places jobs in worker processes, Ray in tasks)."""

    #: Its name in a result's ``where`` (``local``, ``ray``).
    backend: str
    #: How long Ctrl-C waits for running jobs to come back (s).
    grace_s: float

    def infeasible(self, resources: Resources) -> str | None:
        """Why ``resources`` can never be placed (None when they can)."""
        ...

    def start(self, waiting: deque[Job]) -> list[JobResult]:
        """Start waiting jobs as they fit (taking them from ``waiting``; one that does
        not fit yet keeps its place); return results of jobs that could not be sent."""
        ...

    def busy(self) -> bool:
        """Whether a started job has not come back yet."""
        ...

    def collect(self, timeout: float | None) -> list[JobResult]:
        """Wait up to ``timeout`` (None: until one comes back); every result ready."""
        ...

    def interrupt(self) -> None:
        """Ctrl-C: ask the running jobs to stop (what they return is still collected)."""
        ...

    def abandon(self) -> None:
        """Stop whatever still runs (the run is over, or failed)."""
        ...


def drive(jobs: Sequence[Job], progress: Progress | None, place: Placement) -> Iterator[JobResult]:
    """The one job loop of every backend: refuse what can never be placed, start what
    fits, yield each result as it comes back; on Ctrl-C start nothing more, yield what
    returns within ``place.grace_s`` and re-raise; stop what still runs at the end."""
    keys = [j.key for j in jobs]
    if len(set(keys)) != len(keys):
        raise ValueError("job keys must be unique")
    total, done = len(jobs), 0

    def report(result: JobResult) -> JobResult:
        nonlocal done
        done += 1
        if progress is not None:
            progress(result, done, total)
        return result

    waiting: deque[Job] = deque()
    try:
        for job in jobs:
            reason = place.infeasible(job.resources)
            if reason is not None:
                yield report(JobResult(job.key, None, reason, 0.0, {"backend": place.backend}))
            else:
                waiting.append(job)
        try:
            while waiting or place.busy():
                for result in place.start(waiting):
                    yield report(result)
                for result in place.collect(None) if place.busy() else []:
                    yield report(result)
        except KeyboardInterrupt:
            waiting.clear()
            place.interrupt()
            deadline = time.monotonic() + place.grace_s
            while place.busy() and time.monotonic() < deadline:
                for result in place.collect(max(0.0, deadline - time.monotonic())):
                    yield report(result)
            raise
    finally:
        place.abandon()


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line (the message's first non-empty line).

    User errors (:class:`InputError`) keep their own wording without the type name.
    """
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    message = lines[0] if lines else ""
    if isinstance(exc, InputError) and message:
        line = message
    else:
        line = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return line if len(line) <= MAX_ERROR_CHARS else line[: MAX_ERROR_CHARS - 1] + "…"


def describe_worker(gpu_ids: Sequence[Any] | None = None) -> dict[str, Any]:
    """Where the calling process runs: host, pid and the GPUs it was given.

    ``gpu_ids`` defaults to ``CUDA_VISIBLE_DEVICES`` as the process sees it.
    """
    if gpu_ids is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        gpu_ids = [g for g in visible.split(",") if g] if visible else []
    return {"host": socket.gethostname(), "pid": os.getpid(), "gpus": [str(g) for g in gpu_ids]}


def execute(
    key: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    where: Mapping[str, Any],
) -> JobResult:
    """Run one job in this process, timing it and turning an exception into one line."""
    start = time.monotonic()
    try:
        value = fn(*args, **dict(kwargs))
    except Exception as exc:  # noqa: BLE001 - every failure of a job is that job's result
        wall = time.monotonic() - start
        return JobResult(key, None, one_line(exc), wall, dict(where), traceback.format_exc())
    return JobResult(key, value, None, time.monotonic() - start, dict(where))
