"""A :class:`concurrent.futures.Executor` whose ``submit(fn, *args)`` runs ``fn`` as a Ray task.

An experiment sweep (:func:`servecal.sched.experiment.sweep`) takes any executor
as its pool and submits one pure task per (spec, seed) run or max-goodput probe,
more as results come in; this one spreads them over a Ray cluster. Get one from
:meth:`RayBackend.pool <servecal.profiler.jobs.ray_backend.RayBackend.pool>`.

What a local process pool gives its workers, a task gets here too:

* the caller's ``SERVECAL_*`` environment (e.g. the cache folder), captured at
  ``submit`` and handed to Ray as the task's ``runtime_env`` (Ray sets it in the
  worker: nothing here writes ``os.environ``; what a run depends on travels in its
  arguments, as the table flags do in ``RunSpec.trust``);
* the caller's working directory, when it exists on the node (so relative paths
  mean the same there; on a cluster use paths every node sees).

At most ``max_in_flight`` tasks are submitted to Ray at a time; the rest wait in
the driver, so a grid of many thousand runs is handed out as workers free up.
A task whose worker or node dies is retried by Ray (``max_retries``, default 3:
tasks are pure, and a run folder is written atomically); an exception raised by
the function is not retried and comes back from ``future.result()`` as itself,
not wrapped in Ray's ``RayTaskError``.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future
from typing import Any

from servecal.profiler.jobs.base import Resources

#: Environment variables a task takes from the caller (a local pool's workers inherit them).
ENV_PREFIX = "SERVECAL_"
#: How long the dispatcher waits on running tasks before looking for new ones (s).
POLL_S = 0.2


def _call(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any], cwd: str
) -> Any:
    """The body of every task: ``fn(*args, **kwargs)`` in the caller's cwd (its
    environment is the task's ``runtime_env``)."""
    saved_cwd = os.getcwd()
    try:
        if os.path.isdir(cwd):
            os.chdir(cwd)
        return fn(*args, **dict(kwargs))
    finally:
        os.chdir(saved_cwd)


class RayPool(Executor):
    """Runs submitted calls as Ray tasks holding ``resources`` (see the module docstring).

    ``ray`` is the initialised ``ray`` module (the caller owns the instance).
    """

    def __init__(
        self,
        ray: Any,
        resources: Resources = Resources(num_cpus=1),
        max_in_flight: int | None = None,
        max_retries: int = 3,
    ) -> None:
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self._ray = ray
        options: dict[str, Any] = {
            "num_cpus": resources.num_cpus,
            "num_gpus": resources.num_gpus,
            "max_retries": max_retries,
        }
        if resources.accelerator_type:
            options["accelerator_type"] = resources.accelerator_type
        self._remote = ray.remote(_call)
        self._options = options
        self._task = self._remote.options(**options)
        cpus = ray.cluster_resources().get("CPU", 0.0)
        self.max_in_flight = max_in_flight or max(64, int(2 * cpus))
        self._lock = threading.Condition()
        self._queue: deque[tuple[Future, tuple[Any, ...]]] = deque()
        self._running: dict[Any, Future] = {}
        self._closed = False
        self._dispatcher = threading.Thread(
            target=self._dispatch, name="servecal-ray-pool", daemon=True
        )
        self._dispatcher.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
        call = (env, (fn, args, kwargs, os.getcwd()))
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot submit to a pool that was shut down")
            self._queue.append((future, call))
            self._send()
            self._lock.notify_all()
        return future

    def _send(self) -> None:
        """Hand queued calls to Ray up to the limit (hold the lock)."""
        while self._queue and len(self._running) < self.max_in_flight:
            future, (env, call) = self._queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue  # cancelled while it waited here
            try:
                task = (
                    self._remote.options(**self._options, runtime_env={"env_vars": env})
                    if env
                    else self._task
                )
                self._running[task.remote(*call)] = future
            except Exception as exc:  # noqa: BLE001 - e.g. arguments that do not pickle
                future.set_exception(exc)

    def _dispatch(self) -> None:
        """Resolve futures as their tasks finish; if Ray itself fails (the cluster is
        gone), every future left gets that error instead of waiting forever."""
        try:
            self._resolve_until_closed()
        except BaseException as exc:  # noqa: BLE001 - handed to every caller still waiting
            with self._lock:
                self._closed = True
                queued = [future for future, _ in self._queue]
                running = [f for f in self._running.values() if not f.done()]
                self._queue.clear()
                self._running.clear()
            for future in queued:
                if future.set_running_or_notify_cancel():
                    future.set_exception(exc)
            for future in running:
                future.set_exception(exc)

    def _resolve_until_closed(self) -> None:
        """Resolve futures as their tasks finish; send waiting calls as slots free."""
        ray = self._ray
        while True:
            with self._lock:
                while not self._running and not self._closed:
                    self._lock.wait()
                if not self._running:  # closed, and nothing in flight (so none waiting:
                    return  # calls wait here only while the limit is reached)
                refs = list(self._running)
            ready, _ = ray.wait(refs, num_returns=1, timeout=POLL_S)
            if ready:  # and whatever else is done by now
                seen = set(ready)
                rest = [r for r in refs if r not in seen]
                ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0] if rest else []
            for ref in ready:
                with self._lock:
                    future = self._running.pop(ref)
                    self._send()
                try:
                    future.set_result(ray.get(ref))
                except BaseException as exc:  # noqa: BLE001 - the task's failure is its result
                    future.set_exception(_unwrapped(ray, exc))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking calls; ``cancel_futures``: drop waiting calls and stop running
        tasks (their workers are killed: a run folder is written whole or not at all,
        and a run that has not finished has nothing to keep); ``wait``: until every
        future is resolved."""
        with self._lock:
            self._closed = True
            if cancel_futures:
                while self._queue:
                    future, _ = self._queue.popleft()
                    future.cancel()
                for ref in self._running:  # a run is written whole or not at all
                    self._ray.cancel(ref, force=True)
            self._lock.notify_all()
        if wait:
            self._dispatcher.join()


def _unwrapped(ray: Any, exc: BaseException) -> BaseException:
    """The exception the function raised, not Ray's wrapper (whose text holds the
    remote traceback), so callers see what a local pool would have raised."""
    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = getattr(exc, "cause", None)
        if isinstance(cause, BaseException):
            return cause
    return exc
