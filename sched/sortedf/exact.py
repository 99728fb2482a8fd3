"""Exact optimum of tiny instances (n <= 8) by A* search over start times.

Sound for the model: at each boundary the search may start *any* subset of the
waiting requests (so every start time of every request is reachable, including
deliberate idling), keeps only choices whose started requests fit at every future
step (later starts only add memory, so a violation can never be repaired), and
charges each step one unit per unfinished request (``Σ C_i = Σ_t #{i: C_i >= t}``).
The cost-to-go depends only on which requests wait and the progress of the
running ones, not on the clock, so that is the state; A* with an admissible
heuristic (below) returns a cheapest path to the empty state. Idling with
nothing running is never needed (shifting the rest of the schedule one step
earlier stays feasible and is cheaper), which also rules out cycles. Eviction
never helps (dropping an aborted run only frees memory), so this is also the
optimum over schedules with restarts.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any

import numpy as np

from servecal.sched.sortedf.model import Instance

MAX_N = 8


def _fits(
    members: tuple[tuple[int, int], ...], s: tuple[int, ...], o: tuple[int, ...], memory: int
) -> bool:
    """Do running requests ``(rid, steps done)`` fit at every future step?"""
    for rid_k, done_k in members:
        d = o[rid_k] - done_k  # the step (from now) at which request k finishes
        load = 0
        for rid, done in members:
            if o[rid] - done >= d:
                load += s[rid] + done + d
        if load > memory:
            return False
    return True


def _heuristic(
    waiting: int, running: tuple[tuple[int, int], ...], s: tuple, o: tuple, memory: int
) -> int:
    """Admissible cost-to-go: the k-th completion (from now) is at least the k-th
    smallest remaining run, and at least the k smallest remaining KV areas over M
    (the next τ steps offer M·τ token-steps)."""
    rem = [o[i] - e for i, e in running]
    area = [sum(s[i] + j for j in range(e + 1, o[i] + 1)) for i, e in running]
    for i in range(len(o)):
        if waiting >> i & 1:
            rem.append(o[i])
            area.append(o[i] * s[i] + o[i] * (o[i] + 1) // 2)
    rem.sort()
    area.sort()
    total, acc = 0, 0
    for r, a in zip(rem, area, strict=True):
        acc += a
        total += max(r, -(-acc // memory))
    return total


def exact_optimum(inst: Instance) -> tuple[int, np.ndarray]:
    """Minimum total latency and an optimal vector of start boundaries (A* search)."""
    n = inst.n
    if n > MAX_N:
        raise ValueError(f"exact search is for n <= {MAX_N} (got {n})")
    s = tuple(int(x) for x in inst.s)
    o = tuple(int(x) for x in inst.o)
    memory = inst.memory
    start_state: tuple[int, tuple[tuple[int, int], ...]] = ((1 << n) - 1, ())
    best_g = {start_state: 0}
    parent: dict = {start_state: None}
    heap = [(_heuristic(*start_state, s, o, memory), 0, start_state)]
    while heap:
        f, g, state = heapq.heappop(heap)
        if g > best_g[state]:
            continue
        waiting, running = state
        unfinished = bin(waiting).count("1") + len(running)
        if unfinished == 0:
            break
        for sub, nxt in _successors(waiting, running, n, s, o, memory):
            g2 = g + unfinished
            if g2 < best_g.get(nxt, 1 << 60):
                best_g[nxt] = g2
                parent[nxt] = (state, sub)
                heapq.heappush(heap, (g2 + _heuristic(*nxt, s, o, memory), g2, nxt))
    return g, _starts(parent, state, n)


def _successors(
    waiting: int, running: tuple[tuple[int, int], ...], n: int, s: tuple, o: tuple, memory: int
) -> Iterator[tuple[int, tuple[int, tuple[tuple[int, int], ...]]]]:
    """``(sub, next state)`` for every subset ``sub`` of the waiting requests that can
    start now and fit (the empty one only while something runs), one step later."""
    sub = waiting
    while True:
        if sub or running:
            members = running + tuple((i, 0) for i in range(n) if sub >> i & 1)
            if _fits(members, s, o, memory):
                advanced = tuple(sorted((i, d + 1) for i, d in members if d + 1 < o[i]))
                yield sub, (waiting & ~sub, advanced)
        if sub == 0:
            return
        sub = (sub - 1) & waiting


def _starts(parent: dict, goal: Any, n: int) -> np.ndarray:
    """Each request's start boundary on the path to ``goal``: walking back from it, the
    depth of a state is its boundary."""
    path = []
    state = goal
    while parent[state] is not None:
        state, sub = parent[state]
        path.append(sub)
    starts = np.full(n, -1, dtype=np.int64)
    for tau, sub in enumerate(reversed(path)):
        for i in range(n):
            if sub >> i & 1:
                starts[i] = tau
    return starts
