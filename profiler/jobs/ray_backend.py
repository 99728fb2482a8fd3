"""Run jobs as Ray tasks: one task per job, placed by Ray on a node with its resources.

``RayBackend(address=None)`` starts a local Ray instance sized to this machine;
``address="auto"`` (or ``"ray://host:10001"``, ``"host:6379"``) joins an existing
cluster. When Ray is already initialised in this process (a test, a notebook) the
backend uses that instance and leaves it running on :meth:`close`.

Every node must have servecal (and its dependencies) installed at the same
version: a task ships the function by reference (module and name), not its code.
Jobs are not retried (``max_retries=0``): a job that fails is reported as failed,
and rerunning the work is the caller's decision (the fleet resumes it).
"""

from __future__ import annotations

import socket
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
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
from servecal.profiler.jobs.ray_pool import RayPool

INSTALL_HINT = "Ray is not installed: pip install 'servecal[ray]' (or pip install 'ray>=2.50')"


def import_ray() -> Any:
    """The ``ray`` module, or :class:`BackendUnavailable` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise BackendUnavailable(INSTALL_HINT) from None
    return ray


#: How long to try a cluster's address before saying nothing answers there (s).
CONNECT_TIMEOUT_S = 5.0


def check_reachable(address: str | None, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """:class:`BackendUnavailable` when nothing accepts connections at ``address``.

    ``ray.init`` keeps retrying an address where no cluster listens for minutes,
    so a typo in ``--address`` would look like a hang; a TCP connect to ``host:port``
    (``ray://`` or not) answers in at most ``timeout_s``. ``None``, ``auto`` and
    ``local`` name no port and are left to Ray (which fails fast on them).
    """
    if address is None or "://" in address.removeprefix("ray://"):
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise BackendUnavailable(
            f"no Ray cluster at {address!r}: nothing answers at {host}:{port} ({reason})"
        ) from None


def _run_task(
    key: str, fn: Callable[..., Any], args: tuple, kwargs: Mapping[str, Any]
) -> JobResult:
    """The body of every Ray task: run the job where Ray placed it, report where that was."""
    import ray

    context = ray.get_runtime_context()
    where = {
        **describe_worker(ray.get_gpu_ids()),
        "backend": "ray",
        "node": context.get_node_id(),
    }
    return execute(key, fn, args, kwargs, where)


def _error_of(exc: BaseException) -> str:
    """One line for a failure Ray reports instead of a result (crash, OOM kill, lost node)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return one_line(cause)
    return one_line(exc)


class RayBackend:
    """Jobs as Ray tasks (see the module docstring).

    ``max_in_flight``: tasks submitted but not yet returned (default: twice the
    cluster's CPUs, at least 64); the rest wait in the driver, so a sweep of many
    thousand jobs neither floods the scheduler nor makes each wait scan them all.
    ``init_kwargs`` go to ``ray.init`` when this backend starts or joins a cluster.
    """

    name = "ray"

    def __init__(
        self, address: str | None = None, max_in_flight: int | None = None, **init_kwargs: Any
    ) -> None:
        self._ray = ray = import_ray()
        self._owns = not ray.is_initialized()
        if self._owns:
            kwargs = {"include_dashboard": False, "log_to_driver": True, **init_kwargs}
            check_reachable(address)
            try:
                ray.init(address=address, **kwargs)
            except ConnectionError as exc:
                raise BackendUnavailable(
                    f"no Ray cluster at {address!r}: {one_line(exc)}"
                ) from None
        self._task = ray.remote(_run_task)
        self.max_in_flight = max_in_flight

    # ---------------------------------------------------------------- resources
    def nodes(self) -> list[dict[str, float]]:
        return [n.get("Resources", {}) for n in self._ray.nodes() if n.get("Alive")]

    def capacity(self) -> Resources:
        nodes = self.nodes() or [{}]
        best = max(nodes, key=lambda r: (r.get("GPU", 0.0), r.get("CPU", 0.0)))
        return Resources(num_cpus=best.get("CPU", 0.0), num_gpus=int(best.get("GPU", 0.0)))

    def describe(self) -> str:
        total = self._ray.cluster_resources()
        return (
            f"ray ({len(self.nodes())} node(s), {total.get('CPU', 0):g} CPUs, "
            f"{total.get('GPU', 0):g} GPUs)"
        )

    def infeasible(self, res: Resources, nodes: list[dict[str, float]] | None = None) -> str | None:
        """Why no node of the cluster can ever hold ``res`` (None when one can).

        Ray would otherwise queue such a task forever (an autoscaling cluster that
        could add a fitting node is not told apart: say what is needed instead).
        ``nodes``: the alive nodes' resources, when the caller already asked.
        """
        label = f"accelerator_type:{res.accelerator_type}" if res.accelerator_type else None
        for node in self.nodes() if nodes is None else nodes:
            if node.get("CPU", 0.0) + 1e-9 < res.num_cpus or node.get("GPU", 0.0) < res.num_gpus:
                continue
            if label is not None and label not in node:
                continue
            return None
        kind = f" {res.accelerator_type}" if res.accelerator_type else ""
        return (
            f"needs {res.num_cpus:g} CPUs and {res.num_gpus}{kind} GPU(s) on one node; "
            f"no node of this Ray cluster has them"
        )

    # ------------------------------------------------------------------ running
    def submit(self, job: Job) -> Any:
        res = job.resources
        options: dict[str, Any] = {
            "num_cpus": res.num_cpus,
            "num_gpus": res.num_gpus,
            "max_retries": 0,
            "name": job.key,
        }
        if res.accelerator_type:
            options["accelerator_type"] = res.accelerator_type
        return self._task.options(**options).remote(
            job.key, job.fn, tuple(job.args), dict(job.kwargs)
        )

    def run(self, jobs: Sequence[Job], progress: Progress | None = None) -> Iterator[JobResult]:
        """Submit feasible jobs (up to ``max_in_flight`` at a time); yield results as tasks finish.

        On Ctrl-C the running tasks are cancelled (Ray raises KeyboardInterrupt in
        them; ``calibrate`` treats it as its stop signal and keeps what it measured)
        and what comes back within 60 s is still yielded before the interrupt is re-raised.
        """
        cpus = self._ray.cluster_resources().get("CPU", 0.0)
        limit = self.max_in_flight or max(64, int(2 * cpus))
        return drive(jobs, progress, _RayPlacement(self, self._ray, limit))

    def pool(
        self, resources: Resources = Resources(num_cpus=1), max_in_flight: int | None = None
    ) -> RayPool:
        """A :class:`concurrent.futures.Executor` running each ``submit(fn, *args)`` as a
        task holding ``resources`` on this backend's cluster (for an experiment sweep,
        whose tasks arrive as earlier ones finish; see :mod:`.ray_pool`). Shut it down
        before closing the backend."""
        return RayPool(self._ray, resources, max_in_flight)

    def close(self) -> None:
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()

    def __enter__(self) -> RayBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _RayPlacement:
    """One :meth:`RayBackend.run` call's tasks in flight (the
    :class:`~servecal.profiler.jobs.base.Placement` that :func:`drive` runs)."""

    backend = "ray"
    grace_s = 60.0

    def __init__(self, owner: RayBackend, ray: Any, limit: int) -> None:
        self.owner = owner
        self.ray = ray
        self.limit = limit
        self.nodes: list[dict[str, float]] | None = None  # asked once per run
        self.refs: dict[Any, tuple[Job, float]] = {}

    def infeasible(self, resources: Resources) -> str | None:
        if self.nodes is None:
            self.nodes = self.owner.nodes()
        return self.owner.infeasible(resources, self.nodes)

    def start(self, waiting: deque[Job]) -> list[JobResult]:
        """Submit up to the limit; return results of jobs Ray would not take."""
        unsent = []
        while waiting and len(self.refs) < self.limit:
            job = waiting.popleft()
            try:
                self.refs[self.owner.submit(job)] = (job, time.monotonic())
            except Exception as exc:  # noqa: BLE001 - e.g. arguments that cannot pickle
                error = f"job not submitted: {one_line(exc)}"
                unsent.append(JobResult(job.key, None, error, 0.0, {"backend": "ray"}))
        return unsent

    def busy(self) -> bool:
        return bool(self.refs)

    def collect(self, timeout: float | None) -> list[JobResult]:
        ray = self.ray
        ready, _ = ray.wait(list(self.refs), num_returns=1, timeout=timeout)
        if ready:  # and whatever else is done by now, in one pass
            rest = [r for r in self.refs if r not in ready]
            ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0] if rest else []
        out = []
        for ref in ready:
            job, submitted = self.refs.pop(ref)
            try:
                out.append(ray.get(ref))
            except Exception as exc:  # noqa: BLE001 - the task's failure is its result
                wall = time.monotonic() - submitted
                out.append(JobResult(job.key, None, _error_of(exc), wall, {"backend": "ray"}))
        return out

    def interrupt(self) -> None:
        for ref in self.refs:
            self.ray.cancel(ref)

    def abandon(self) -> None:
        for ref in self.refs:
            self.ray.cancel(ref, force=True)
