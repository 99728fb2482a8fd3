"""Sorted-F+Amin: Sorted-F when output lengths are unknown (after A_min, arXiv 2508.14544).

Prediction model (explicit and seeded): the scheduler sees, for each request, a
lower bound ``ℓ_i = max(1, ⌊o_i · u_i⌋)`` with ``u_i ~ Uniform(1 - width, 1)`` drawn from
the caller's generator; ``width = 0`` is a perfect predictor. The true ``o_i`` is
revealed only when the request finishes.

Planning: Sorted-F Phase 1 on ``(s_i, ℓ_i)``. Execution, step by step:

* a running request's estimated output is ``max(ℓ_i, done_i + 1)``: once it has
  produced ``ℓ_i`` tokens without finishing, the scheduler only knows it needs at
  least one more (the refinement as tokens come);
* the head of the list is admitted when the estimated future peak of the running
  requests plus it stays ``<= M`` (the Phase-2 test, on estimates);
* estimates can be short, so a real step can overflow: then the most recently
  admitted request is evicted (recompute) until the step fits; it keeps its place
  in the list and its bound rises to the tokens it had produced plus one.

Each eviction raises a bound that never exceeds the true ``o_i``, so the run ends.
"""

from __future__ import annotations

import heapq

import numpy as np

from servecal.sched.sortedf.admission import _earliest_fit, future_peak
from servecal.sched.sortedf.model import Instance, Segments


def predict_lower_bounds(o: np.ndarray, rng: np.random.Generator, width: float = 0.5) -> np.ndarray:
    """Seeded lower-bound predictions ``max(1, ⌊o·u⌋)``, ``u ~ U(1 - width, 1)``."""
    if not 0.0 <= width < 1.0:
        raise ValueError("width must be in [0, 1)")
    u = rng.uniform(1.0 - width, 1.0, size=len(o))
    return np.maximum(1, np.floor(np.asarray(o) * u)).astype(np.int64)


def run_with_estimates(inst: Instance, order: np.ndarray, lower: np.ndarray) -> Segments:
    """Execute ``order`` on estimated outputs with refinement and evictions (module doc).

    Semantically a step-by-step loop; it jumps over boundaries at which nothing can
    change (no completion, no overflow, no estimate moving, head provably not fitting).
    """
    s, o, memory = inst.s, inst.o, inst.memory
    bound = np.asarray(lower, dtype=np.int64).copy()
    if (bound < 1).any() or (bound > o).any():
        raise ValueError("lower bounds must lie in [1, o_i]")
    rank = np.empty(inst.n, dtype=np.int64)
    rank[np.asarray(order, dtype=np.int64)] = np.arange(inst.n)
    queue = [(int(rank[i]), int(i)) for i in range(inst.n)]
    heapq.heapify(queue)
    rid = np.zeros(0, dtype=np.int64)  # running, in admission order
    start = np.zeros(0, dtype=np.int64)
    seg: tuple[list[int], list[int], list[int], list[bool]] = ([], [], [], [])
    tau = 0
    while queue or rid.size:
        # 1. Completions at this boundary.
        end = start + o[rid]
        fin = end == tau
        if fin.any():
            for i, st in zip(rid[fin].tolist(), start[fin].tolist(), strict=True):
                for lst, v in zip(seg, (i, st, int(o[i]), True), strict=True):
                    lst.append(v)
            rid, start = rid[~fin], start[~fin]
        # 2. Admission from the head of the list, on estimates.
        done = tau - start
        est = np.maximum(bound[rid], done + 1)
        while queue:
            i = queue[0][1]
            held = np.append(s[rid] + done, s[i])
            remaining = np.append(est - done, bound[i])
            if rid.size and future_peak(held, remaining) > memory:
                break
            heapq.heappop(queue)
            rid, start = np.append(rid, i), np.append(start, tau)
            done, est = np.append(done, 0), np.append(est, bound[i])
        # 3. The true next step must fit: evict the newest until it does.
        use = int((s[rid] + tau + 1 - start).sum())
        while use > memory:
            i, st = int(rid[-1]), int(start[-1])
            rid, start, done, est = rid[:-1], start[:-1], done[:-1], est[:-1]
            use -= int(s[i] + tau + 1 - st)
            for lst, v in zip(seg, (i, st, tau - st, False), strict=True):
                lst.append(v)
            bound[i] = max(int(bound[i]), tau - st + 1)
            heapq.heappush(queue, (int(rank[i]), i))
        if not rid.size:
            continue  # the head is admitted alone at this same boundary
        # 4. Next boundary at which anything can change.
        nxt = _next_boundary(inst, rid, start, done, est, bound, queue, tau)
        tau = max(nxt, tau + 1)
    return Segments.from_lists(*seg)


def _next_boundary(
    inst: Instance,
    rid: np.ndarray,
    start: np.ndarray,
    done: np.ndarray,
    est: np.ndarray,
    bound: np.ndarray,
    queue: list[tuple[int, int]],
    tau: int,
) -> int:
    """The next boundary after ``tau`` at which anything can change for the running
    requests ``rid``: a completion, the first overflow, an estimate reaching its bound,
    or the earliest boundary at which the head of the waiting ``queue`` might fit."""
    s, o, memory = inst.s, inst.o, inst.memory
    nxt = int((start + o[rid]).min())
    base = int((s[rid] - start).sum())
    nxt = min(nxt, (memory - base) // rid.size)  # boundary before the first overflow
    if not queue:
        return nxt
    head = queue[0][1]
    # Overdue requests (estimate = done + 1) enter the test only through the
    # next step's memory, which rises with p; the others have fixed estimates
    # until the first of them reaches its bound.
    fresh = done + 1 <= bound[rid]
    est_end = (start + est)[fresh]
    if est_end.size:
        nxt = min(nxt, int(est_end.min()))
    p_max = (memory - int(s[head]) - 1 - base) // rid.size - 1  # next step still fits
    hi = min(nxt - 1, p_max)
    if hi < tau + 1:
        return nxt
    if est_end.size:
        off = (s[rid] - start)[fresh]
        p = _earliest_fit(off, est_end, int(s[head]), int(bound[head]), memory, tau + 1, hi)
        return nxt if p is None else min(nxt, p)
    return min(nxt, tau + 1)
