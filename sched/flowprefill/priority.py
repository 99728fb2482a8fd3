"""FlowPrefill's priority rule (docs/spec.md §3, from the released code), as pure functions.

* deadline ``d = arrival + TTFT_SLO``;
* slack ``= (d − now) − max(predicted remaining prefill time, 0)``;
* priority ``sign(slack) / d``, highest first.

Positive-slack requests therefore come in earliest-deadline order, then the ones
with exactly zero slack, then the already-late ones (negative slack), among which
the *latest* deadline comes first (``−1/d`` grows with ``d``): a request that is
already lost does not keep pushing the savable ones late. Ties go to the earlier
arrival, then the lower id, so the order is total and deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np

from servecal.sched.flowprefill.state import Job


def slack_ms(deadline_ms: float, now_ms: float, remaining_ms: float) -> float:
    """Time to spare if the request ran alone from now on."""
    return (deadline_ms - now_ms) - max(remaining_ms, 0.0)


def priority(deadline_ms: float, slack: float) -> float:
    """``sign(slack) / d``; larger runs first. ``d`` must be > 0."""
    if not deadline_ms > 0:
        raise ValueError(f"deadline must be > 0 ms, got {deadline_ms}")
    return math.copysign(1.0, slack) / deadline_ms if slack != 0 else 0.0


def by_priority(
    jobs: Iterable[Job], now_ms: float, remaining_ms: Callable[[Job], float]
) -> list[Job]:
    """``jobs`` sorted highest priority first (ties: earlier arrival, then lower id)."""

    def key(job: Job) -> tuple[float, float, int]:
        slack = slack_ms(job.deadline_ms, now_ms, remaining_ms(job))
        return (-priority(job.deadline_ms, slack), job.arrival_ms, job.rid)

    return sorted(jobs, key=key)


def priority_order(
    jobs: Iterable[Job], now_ms: float, remaining_ms: Callable[[Job], float]
) -> list[Job]:
    """The order of :func:`by_priority`, vectorised: one numpy sort instead of a Python
    key per job, for the long queues of an overloaded prefill instance."""
    jobs = list(jobs)
    n = len(jobs)
    if n < 2:
        return jobs
    d = np.fromiter((j.deadline_ms for j in jobs), float, n)
    rem = np.fromiter((remaining_ms(j) for j in jobs), float, n)
    if not (d > 0).all():
        raise ValueError("deadlines must be > 0 ms")
    prio = np.sign((d - now_ms) - np.maximum(rem, 0.0)) / d
    arrival = np.fromiter((j.arrival_ms for j in jobs), float, n)
    rid = np.fromiter((j.rid for j in jobs), np.int64, n)
    return [jobs[i] for i in np.lexsort((rid, arrival, -prio))]
