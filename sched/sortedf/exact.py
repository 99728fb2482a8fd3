"""Exact optimum of tiny instances (n <= 8) by memoised search over start times.

Sound for the model: at each boundary the search may start *any* subset of the
waiting requests (so every start time of every request is reachable, including
deliberate idling), keeps only choices whose started requests fit at every future
step (later starts only add memory, so a violation can never be repaired), and
charges each step one unit per unfinished request (``Σ C_i = Σ_t #{i: C_i >= t}``).
The cost-to-go depends only on which requests wait and the progress of the
running ones, not on the clock, so states are memoised on that. Idling with
nothing running is never needed (shifting the rest of the schedule one step
earlier stays feasible and is cheaper), which also rules out cycles. Eviction
never helps (dropping an aborted run only frees memory), so this is also the
optimum over schedules with restarts.
"""

from __future__ import annotations

from functools import cache

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


def exact_optimum(inst: Instance) -> tuple[int, np.ndarray]:
    """Minimum total latency and an optimal vector of start boundaries."""
    n = inst.n
    if n > MAX_N:
        raise ValueError(f"exact search is for n <= {MAX_N} (got {n})")
    s = tuple(int(x) for x in inst.s)
    o = tuple(int(x) for x in inst.o)
    memory = inst.memory
    full = (1 << n) - 1

    @cache
    def solve(waiting: int, running: tuple[tuple[int, int], ...]) -> tuple[int, int]:
        """(cost-to-go, subset started now) for a state; running sorted by rid."""
        unfinished = bin(waiting).count("1") + len(running)
        if unfinished == 0:
            return 0, 0
        best, best_w = 1 << 60, 0
        sub = waiting
        while True:
            if sub or running:
                members = running + tuple((i, 0) for i in range(n) if sub >> i & 1)
                if _fits(members, s, o, memory):
                    nxt = tuple(sorted((i, d + 1) for i, d in members if d + 1 < o[i]))
                    cost = unfinished + solve(waiting & ~sub, nxt)[0]
                    if cost < best:
                        best, best_w = cost, sub
            if sub == 0:
                break
            sub = (sub - 1) & waiting
        return best, best_w

    total = solve(full, ())[0]
    # Replay the choices to recover start times.
    starts = np.full(n, -1, dtype=np.int64)
    waiting, running, tau = full, (), 0
    while waiting:
        _, w = solve(waiting, running)
        members = running + tuple((i, 0) for i in range(n) if w >> i & 1)
        for i in range(n):
            if w >> i & 1:
                starts[i] = tau
        waiting &= ~w
        running = tuple(sorted((i, d + 1) for i, d in members if d + 1 < o[i]))
        tau += 1
    solve.cache_clear()
    return total, starts
