"""The discrete-time batch-scheduling model of docs/spec.md §2 and its one simulator.

Step semantics (docs/sortedf.md has the long version):

* time is counted in *steps* (engine iterations) ``t = 1, 2, ...``; the *boundary*
  ``τ`` is the moment between step ``τ`` and step ``τ + 1`` (``τ = 0`` is the start);
* a request started at boundary ``S`` runs steps ``S + 1 .. S + o``; its prefill is
  done in step ``S + 1`` together with its first output token, so at its ``j``-th
  step it holds ``s + j`` KV tokens (``s + 1`` right after the prefill);
* it completes at the end of step ``C = S + o`` and its memory is freed before step
  ``C + 1``; its latency is ``C`` (all requests arrive at 0);
* at every step the KV held by all running requests must be ``<= M``.

Every algorithm's output is a list of *segments* ``(rid, start, length, done)``: a
request that is evicted (recompute preemption) leaves an aborted segment and is
started again later. :func:`score_schedule` scores them all, checking every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Instance:
    """``n`` requests at time 0: prompt sizes ``s``, output lengths ``o``, capacity ``M``."""

    s: np.ndarray
    o: np.ndarray
    memory: int

    def __post_init__(self) -> None:
        s = np.asarray(self.s, dtype=np.int64)
        o = np.asarray(self.o, dtype=np.int64)
        object.__setattr__(self, "s", s)
        object.__setattr__(self, "o", o)
        if s.ndim != 1 or s.shape != o.shape:
            raise ValueError("s and o must be 1-d arrays of the same length")
        if s.size and (s.min() < 0 or o.min() < 1):
            raise ValueError("prompt sizes must be >= 0 and output lengths >= 1")
        if self.memory < 1:
            raise ValueError("memory must be >= 1")
        if s.size and int((s + o).max()) > self.memory:
            i = int(np.argmax(s + o))
            raise ValueError(
                f"request {i} needs s + o = {int(s[i] + o[i])} > memory {self.memory}: "
                "it can never run"
            )

    @property
    def n(self) -> int:
        return int(self.s.size)

    def subset(self, idx: np.ndarray) -> Instance:
        return Instance(self.s[idx], self.o[idx], self.memory)


@dataclass(frozen=True)
class Segments:
    """One run of a request each: start boundary, steps run, and whether it finished."""

    rid: np.ndarray
    start: np.ndarray
    length: np.ndarray
    done: np.ndarray

    @staticmethod
    def from_starts(starts: np.ndarray, o: np.ndarray) -> Segments:
        """A preemption-free schedule: request ``i`` starts at ``starts[i]`` and finishes."""
        n = len(starts)
        return Segments(
            np.arange(n, dtype=np.int64),
            np.asarray(starts, dtype=np.int64),
            np.asarray(o, dtype=np.int64).copy(),
            np.ones(n, dtype=bool),
        )

    @staticmethod
    def from_lists(rid: list, start: list, length: list, done: list) -> Segments:
        return Segments(
            np.asarray(rid, dtype=np.int64),
            np.asarray(start, dtype=np.int64),
            np.asarray(length, dtype=np.int64),
            np.asarray(done, dtype=bool),
        )


@dataclass(frozen=True)
class ScheduleScore:
    """What the simulator measured for one schedule (times in steps)."""

    completion: np.ndarray
    total_latency: int
    mean_latency: float
    makespan: int
    peak_memory: int
    mean_utilisation: float
    evictions: int
    wasted_steps: int


class InfeasibleSchedule(AssertionError):
    """A schedule broke the model: memory above ``M`` or a request not completed once."""


def memory_profile(inst: Instance, seg: Segments) -> np.ndarray:
    """KV held at every step ``t = 1 .. T`` (index ``t - 1``), by difference arrays."""
    if seg.rid.size == 0:
        return np.zeros(0, dtype=np.int64)
    end = seg.start + seg.length
    horizon = int(end.max())
    live = seg.length > 0
    first, last = seg.start[live] + 1, end[live]
    offset = inst.s[seg.rid[live]] - seg.start[live]
    count = np.zeros(horizon + 2, dtype=np.int64)
    base = np.zeros(horizon + 2, dtype=np.int64)
    np.add.at(count, first, 1)
    np.add.at(count, last + 1, -1)
    np.add.at(base, first, offset)
    np.add.at(base, last + 1, -offset)
    t = np.arange(horizon + 2, dtype=np.int64)
    usage = np.cumsum(base) + t * np.cumsum(count)
    return usage[1 : horizon + 1]


def score_schedule(inst: Instance, seg: Segments) -> ScheduleScore:
    """Check a schedule against the model and score it; raise :class:`InfeasibleSchedule`."""
    n = inst.n
    _check_runs(inst, seg)
    completion = np.zeros(n, dtype=np.int64)
    completion[seg.rid[seg.done]] = (seg.start + seg.length)[seg.done]
    last_start = np.zeros(n, dtype=np.int64)
    np.maximum.at(last_start, seg.rid, seg.start)
    if n and (last_start > completion - inst.o).any():
        raise InfeasibleSchedule("a request runs again after it completed")
    usage = memory_profile(inst, seg)
    peak = int(usage.max()) if usage.size else 0
    if peak > inst.memory:
        t = int(np.argmax(usage)) + 1
        raise InfeasibleSchedule(f"memory {peak} > M = {inst.memory} at step {t}")
    total = int(completion.sum())
    makespan = int(completion.max()) if n else 0
    return ScheduleScore(
        completion=completion,
        total_latency=total,
        mean_latency=total / n if n else 0.0,
        makespan=makespan,
        peak_memory=peak,
        mean_utilisation=float(usage.mean() / inst.memory) if usage.size else 0.0,
        evictions=int((~seg.done).sum()),
        wasted_steps=int(seg.length[~seg.done].sum()),
    )


def _check_runs(inst: Instance, seg: Segments) -> None:
    """Every segment names a request, starts and lasts >= 0; each request completes once,
    in a run of exactly ``o_i`` steps, after aborted runs shorter than that, none of
    its runs overlapping."""
    n = inst.n
    if seg.rid.size and (seg.rid.min() < 0 or seg.rid.max() >= n):
        raise InfeasibleSchedule("segment names an unknown request")
    if seg.rid.size and (seg.start.min() < 0 or seg.length.min() < 0):
        raise InfeasibleSchedule("negative start or length")
    done_count = np.bincount(seg.rid[seg.done], minlength=n)
    if n and (done_count != 1).any():
        bad = int(np.flatnonzero(done_count != 1)[0])
        raise InfeasibleSchedule(f"request {bad} completes {int(done_count[bad])} times")
    if (seg.length[seg.done] != inst.o[seg.rid[seg.done]]).any():
        raise InfeasibleSchedule("a completed segment does not run exactly o_i steps")
    if (seg.length[~seg.done] >= inst.o[seg.rid[~seg.done]]).any():
        raise InfeasibleSchedule("an aborted segment ran o_i steps or more")
    # Runs of one request must not overlap, and the completed one must come last.
    order = np.lexsort((seg.start, seg.rid))
    r, st, ln = seg.rid[order], seg.start[order], seg.length[order]
    same = r[1:] == r[:-1]
    if (st[1:][same] < (st + ln)[:-1][same]).any():
        raise InfeasibleSchedule("two runs of one request overlap")


def batch_peak(s: np.ndarray, o: np.ndarray) -> int:
    """Peak KV of requests started together: ``max_j Σ_{o_i >= j} (s_i + j)``.

    Between completions the memory only rises, so the peak sits at some ``j = o_k``;
    with requests sorted by ``o`` descending, position ``p`` sees every request with
    ``o >= o_p`` before it (ties give smaller, never larger, values than the true one).
    """
    if len(o) == 0:
        return 0
    idx = np.argsort(-o, kind="stable")
    od = o[idx]
    return int((np.cumsum(s[idx]) + od * np.arange(1, len(od) + 1)).max())
