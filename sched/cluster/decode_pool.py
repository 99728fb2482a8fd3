"""The decode pool of a disaggregated deployment: decode-only replicas (docs/capacity.md).

A request reaches the decode pool with its prompt's KV already computed (on a prefill
replica) and moved (:mod:`.kv_transfer`). A decode replica runs decode-only iterations:
every admitted request emits one token per iteration, the iteration costing the
replica's truth at ``(n_decode, chunk = 0, ctx)`` — it never runs a prefill, so no
request's TPOT ever includes one. Admission is first come, first served under the KV
capacity, reserving each request's full length (prompt + output) so that no request
is ever preempted (a decode worker that reserved less would recompute on a prefill
replica, which this model does not have).

Tokens: the prefill computed the first token; the client sees it with the decode
replica's first iteration, which also emits the second. So a request of ``o`` output
tokens decodes ``max(1, o − 1)`` iterations, its TTFT ends at the first one, and its
inter-token gaps are ``0`` (tokens 1 and 2 together) then each later iteration's
duration.

The hot loop is O(1) per iteration plus O(1) per admission and finish, as the engine's:
a request's gaps are a slice of the iteration durations, its finish keyed by
iteration index.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from servecal.sched.request import Request


class DecodeReplica:
    """One decode-only replica and the load figures a router reads (the names a
    :class:`~servecal.sched.cluster.replica.Replica` has: ``index``, ``name``,
    ``predictor``, ``outstanding``, ``queued_prompt_tokens`` (always 0: nothing is left
    to prefill), ``by_requests``, ``by_tokens``, ``steps``, ``n_decode``, ``ctx_mean``,
    ``now_ms``, ``kv_used``, ``kv_capacity``)."""

    def __init__(
        self, index: int, name: str, executor: Any, predictor: Any, kv_capacity: int
    ) -> None:
        self.index, self.name = index, name
        self.executor, self.predictor = executor, predictor
        self.kv_capacity = kv_capacity
        self.now_ms = 0.0
        self.kv_used = 0  # reserved: prompt + output of every admitted request
        self.queued_prompt_tokens = 0
        self.waiting: deque[tuple[Request, float]] = deque()
        self.running: dict[int, tuple[Request, int]] = {}  # rid -> (request, first iteration)
        self._ctx_sum = 0  # KV the running requests hold now
        self._finish_at: dict[int, list[int]] = {}
        self.starts: list[float] = []
        self.durations: list[float] = []
        self.energies: list[float] = []
        self.n_decodes: list[int] = []
        self.ctxs: list[float] = []
        self.done: dict[int, tuple[Request, int, float]] = {}  # rid -> (req, first it, arrive)
        self._arrive: dict[int, float] = {}
        self.rejected: list[Request] = []

    # -- what a router reads -----------------------------------------------------------
    @property
    def outstanding(self) -> int:
        return len(self.running) + len(self.waiting)

    @property
    def by_requests(self) -> tuple[int, int]:
        """The least-requests key, as :class:`~servecal.sched.cluster.replica.Replica`'s."""
        return (self.outstanding, self.index)

    @property
    def by_tokens(self) -> tuple[int, int, int]:
        """The least-tokens key, as :class:`~servecal.sched.cluster.replica.Replica`'s."""
        return (self.queued_prompt_tokens, self.outstanding, self.index)

    @property
    def n_decode(self) -> int:
        return len(self.running)

    @property
    def ctx_mean(self) -> float:
        return self._ctx_sum / len(self.running) if self.running else 0.0

    @property
    def steps(self) -> int:
        return len(self.durations)

    # -- what the pool does --------------------------------------------------------------
    def add(self, request: Request, arrive_ms: float) -> None:
        """``request``'s KV lands here at ``arrive_ms`` (no earlier than the last added)."""
        if not self.running and not self.waiting:
            self.now_ms = max(self.now_ms, arrive_ms)
        self.waiting.append((request, arrive_ms))

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def advance_to(self, t_ms: float) -> None:
        """Run the iterations that start before ``t_ms``."""
        while self.now_ms < t_ms and self.has_work():
            self.step()

    def finish(self) -> None:
        while self.has_work():
            self.step()

    def _admit(self) -> None:
        waiting, now, idx = self.waiting, self.now_ms, len(self.durations)
        while waiting and waiting[0][1] <= now:
            req, arrive = waiting[0]
            need = req.prompt_tokens + req.output_tokens
            if need > self.kv_capacity:  # can never fit, whatever runs
                waiting.popleft()
                self.rejected.append(req)
                continue
            if self.kv_used + need > self.kv_capacity:
                return  # FCFS: the head waits for KV to free
            waiting.popleft()
            self.kv_used += need
            self._ctx_sum += req.prompt_tokens
            self.running[req.rid] = (req, idx)
            self._arrive[req.rid] = arrive
            last = idx + max(1, req.output_tokens - 1) - 1
            self._finish_at.setdefault(last, []).append(req.rid)

    def step(self) -> None:
        """One decode-only iteration (or a wait for the next arrival)."""
        self._admit()
        if not self.running:
            if self.waiting:  # nothing runs: wait for the head's KV to land
                self.now_ms = max(self.now_ms, self.waiting[0][1])
                self._admit()
            if not self.running:
                return
        n = len(self.running)
        ctx = self._ctx_sum / n
        start = self.now_ms
        duration, energy = self.executor.execute(n, 0, ctx, 0.0, start)
        if not duration > 0:
            raise RuntimeError(f"executor returned a non-positive duration {duration!r}")
        idx = len(self.durations)
        self.starts.append(start)
        self.durations.append(duration)
        self.energies.append(math.nan if energy is None else energy)
        self.n_decodes.append(n)
        self.ctxs.append(ctx)
        self.now_ms = start + duration
        self._ctx_sum += n
        for rid in self._finish_at.pop(idx, ()):
            req, first = self.running.pop(rid)
            self.kv_used -= req.prompt_tokens + req.output_tokens
            self._ctx_sum -= req.prompt_tokens + (idx - first + 1)
            self.done[rid] = (req, first, self._arrive.pop(rid))

    def iteration_columns(self) -> dict[str, np.ndarray]:
        n = len(self.durations)
        return {
            "start_ms": np.asarray(self.starts, dtype=float),
            "duration_ms": np.asarray(self.durations, dtype=float),
            "n_decode": np.asarray(self.n_decodes, dtype=np.int64),
            "chunk": np.zeros(n, dtype=np.int64),
            "n_prefills": np.zeros(n, dtype=np.int64),
            "ctx": np.asarray(self.ctxs, dtype=float),
            "prefix": np.zeros(n, dtype=float),
            "energy_j": np.asarray(self.energies, dtype=float),
            "decision_us": np.zeros(n, dtype=float),
            "budget_ms": np.full(n, math.nan),
        }

    def token_times(self, rid: int) -> tuple[float, float, np.ndarray]:
        """A finished request's ``(first token ms, completion ms, inter-token gaps)``."""
        req, first, _ = self.done[rid]
        last = first + max(1, req.output_tokens - 1) - 1
        ends = self.starts[first] + self.durations[first]
        done = self.starts[last] + self.durations[last]
        if req.output_tokens < 2:
            return ends, done, np.zeros(0)
        gaps = np.asarray([0.0, *self.durations[first + 1 : last + 1]], dtype=float)
        return ends, done, gaps


def run_decode_pool(
    arrivals: Sequence[tuple[float, Request]], replicas: Sequence[DecodeReplica], router: Any
) -> list[int]:
    """Route each ``(arrive_ms, request)`` (in that order) to a decode replica, the
    replicas stepped to each arrival first (as :class:`~servecal.sched.cluster.Cluster`
    does); run them to the end. Returns the decode replica index of each arrival."""
    by_index = {r.index: r for r in replicas}
    oblivious = not getattr(router, "reads_replicas", True)
    chosen = []
    for t, request in arrivals:
        if not oblivious:
            for r in replicas:
                r.advance_to(t)
        k = router.route(request, replicas)
        if k not in by_index:
            raise ValueError(f"router chose decode replica {k!r}, not one of {sorted(by_index)}")
        by_index[k].add(request, t)
        chosen.append(k)
    for r in replicas:
        r.finish()
    return chosen
