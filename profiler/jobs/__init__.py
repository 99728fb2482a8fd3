"""A small job backend: run picklable functions where their resources are, locally or on Ray.

The calibration fleet (:mod:`servecal.profiler.fleet`) runs one job per (device,
model, TP) calibration on it; an experiment sweep can run one job per grid cell and
seed the same way. The whole interface::

    from servecal.profiler.jobs import Job, Resources, open_backend

    with open_backend("ray", address="auto") as backend:      # or "local"
        jobs = [Job(f"cell-{i}", run_cell, (config, seed), resources=Resources(num_cpus=1))
                for i, (config, seed) in enumerate(cells)]
        for result in backend.run(jobs, progress=lambda r, done, total: ...):
            if result.ok:
                use(result.key, result.value)
            else:
                record(result.key, result.error)     # one line; the other jobs go on

* ``fn`` must be a module-level function and its arguments and return value must
  pickle; it runs in a worker process, never in the caller.
* Results come back in completion order, each exactly once, with ``wall_s`` and
  ``where`` (backend, host, pid, GPUs); ``progress(result, done, total)`` is called
  before each is yielded.
* A job raising an exception, a worker process dying (OOM kill, lost device) and a
  job no node can ever hold (``infeasible``) all become a result with ``error`` set.
* Ctrl-C: running jobs are given a grace period to return what they have, those
  results are yielded, then ``KeyboardInterrupt`` propagates.
* ``capacity()`` is the biggest single placement (a node's CPUs and GPUs):
  a job that must own a whole host asks for ``capacity().num_cpus`` CPUs.

``local``: worker processes on this host, one job per free device for GPU jobs
(see :mod:`.local`). ``ray``: one Ray task per job with ``num_cpus``/``num_gpus``/
``accelerator_type`` (see :mod:`.ray_backend`; Ray is optional: ``pip install
'servecal[ray]'``).
"""

from __future__ import annotations

from typing import Any

from servecal.plugins import Registry
from servecal.profiler.jobs.base import (
    Backend,
    BackendUnavailable,
    Job,
    JobResult,
    Progress,
    Resources,
    describe_worker,
    one_line,
)
from servecal.profiler.jobs.local import Gpu, LocalBackend, visible_gpus

#: ``--backend`` of ``servecal fleet``: where jobs run, each opened by
#: ``open(address, **options) -> Backend`` (imported on use: Ray only when asked for).
BACKENDS = Registry("job backend", "--backend", "open(address, **options) -> Backend", user_form="")
# fmt: off
BACKENDS.add("local", "servecal.profiler.jobs.local:open_local", "worker processes on this host: its CPUs and visible GPUs")  # noqa: E501
BACKENDS.add("ray", "servecal.profiler.jobs.ray_backend:RayBackend", "one Ray task per job on a Ray cluster (servecal[ray]; --address to join one)")  # noqa: E501
# fmt: on


def open_backend(kind: str, address: str | None = None, **options: Any) -> Backend:
    """A backend by name (:data:`BACKENDS`): ``local`` (``address`` must be None) or ``ray``.

    Raises :class:`BackendUnavailable` (an ``InputError``: one line, exit 2) when
    Ray is asked for and not installed or not reachable.
    """
    if kind not in BACKENDS:
        raise BackendUnavailable(
            f"unknown backend {kind!r}; choose {' or '.join(BACKENDS.names())}"
        )
    opener = BACKENDS.load(BACKENDS.entries[kind].target)
    return opener(address, **options)  # type: ignore[no-any-return]


__all__ = [
    "BACKENDS",
    "Backend",
    "BackendUnavailable",
    "Gpu",
    "Job",
    "JobResult",
    "LocalBackend",
    "Progress",
    "Resources",
    "describe_worker",
    "one_line",
    "open_backend",
    "visible_gpus",
]
