"""Continuous batching from a priority list, with known output lengths.

Two admission rules share one exact fit test (with a newcomer, memory stays
``<= M`` at every future completion time of the running requests and of itself;
memory only rises between completions, so those are the only times to check).
Because the test is exact, no schedule here ever needs an eviction.

* :func:`admit_in_order`, *head-of-line* (MC-SF, Sorted-LP, Sorted-F with
  ``phase2="head"``): at every boundary the head of the list is admitted if it
  fits; otherwise nothing further down the list is tried (as MC-SF says: "stop at
  the first that does not fit").
* :func:`admit_by_group`, *skipping within a group* (Sorted-F's ``phase2="batch"``,
  a group being a Phase-1 batch): at every boundary the waiting entries of the
  earliest group that still has any (and of the next ``lookahead`` groups) are
  tried in list order, and each that fits is admitted. One group per entry is
  head-of-line again; one group for all is unrestricted skipping.

Both are event-driven: between two completions the running set is fixed, so the
earliest boundary at which a candidate fits is found by jumping over the
boundaries that break a constraint instead of stepping through time. The loops
are compiled with numba (``cache=True``: the first call in a fresh install
compiles for a few seconds, later processes load the cache): list polishing
runs the executor ~10⁵ times per instance. Compiled, one run of a 2000-request
list takes 1-2 ms where the vectorised numpy version it replaced took 0.8-0.9 s
(``benchmarks/sortedf.py``, docs/sortedf.md §5). tests/sched/sortedf check both
rules against step-by-step references.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from servecal.sched.sortedf.model import Instance


@njit(cache=True)
def _fit_tables(
    end: np.ndarray, off: np.ndarray, r: int, memory: int, suf_off: np.ndarray, slack: np.ndarray
) -> None:
    """For running requests ``0..r-1`` sorted by completion ``end`` (a request holds
    ``off + t`` at step ``t``): ``suf_off[k] = Σ_{m >= k} off[m]`` and ``slack[k]``,
    the memory left at step ``end[k]`` (every request with ``end >= end[k]`` still
    holds its KV then)."""
    suf_off[r] = 0
    for k in range(r - 1, -1, -1):
        suf_off[k] = suf_off[k + 1] + off[k]
    k = 0
    while k < r:
        j = k
        while j < r and end[j] == end[k]:
            j += 1
        left = memory - (suf_off[k] + end[k] * (r - k))
        for q in range(k, j):
            slack[q] = left
        k = j


@njit(cache=True)
def _earliest(
    end: np.ndarray,
    suf_off: np.ndarray,
    slack: np.ndarray,
    r: int,
    s: int,
    o: int,
    memory: int,
    lo: int,
    hi: int,
) -> int:
    """First boundary ``p`` in ``[lo, hi]`` at which a request ``(s, o)`` can start
    next to running requests ``0..r-1`` (tables of :func:`_fit_tables`; all still run
    through ``hi``), or -1.

    Started at ``p`` it holds ``s + t - p`` at step ``t`` in ``(p, p + o]``. Two tests:
    at a running request's completion ``end[k]`` (if the newcomer still runs then,
    ``p >= end[k] - o``) it must fit in ``slack[k]``, which fails for
    ``p < end[k] + s - slack[k]``; and at its own completion ``p + o`` it holds
    ``s + o`` beside whoever still runs. A failing ``p`` jumps to the first boundary
    that can pass the test it failed, so each candidate takes a few passes over
    the running set."""
    p = lo
    while p <= hi:
        moved = False
        for k in range(r):
            if end[k] - o <= p <= end[k] + s - slack[k] - 1:
                p = end[k] + s - slack[k]
                moved = True
        if moved:
            continue
        t = p + o
        idx = 0  # first request still running at step t
        while idx < r and end[idx] < t:
            idx += 1
        if suf_off[idx] + t * (r - idx) + s + o <= memory:
            return p
        # Until p + o passes end[idx] the same requests are there and hold more.
        p = end[idx] - o + 1
    return -1


@njit(cache=True)
def _admit(
    s: np.ndarray, o: np.ndarray, memory: int, order: np.ndarray, group: np.ndarray, lookahead: int
) -> np.ndarray:
    """Start boundary of every request under the skipping rule (see module doc);
    ``group`` non-decreasing along ``order``."""
    # One function: the numba-compiled event loop (docs/design.md, decision 10); its
    # state lives in preallocated arrays that helper kernels would have to pass around.
    n = order.size
    starts = np.full(n, -1, np.int64)
    waiting = np.ones(n, np.bool_)
    g_start = np.empty(n + 1, np.int64)  # list position where each group begins
    n_groups = 0
    for k in range(n):
        if k == 0 or group[k] != group[k - 1]:
            g_start[n_groups] = k
            n_groups += 1
    g_start[n_groups] = n
    g_left = g_start[1 : n_groups + 1] - g_start[:n_groups]  # waiting entries per group
    end = np.empty(n, np.int64)  # running requests, sorted by completion
    off = np.empty(n, np.int64)
    suf_off = np.empty(n + 1, np.int64)
    slack = np.empty(n, np.int64)
    cand = np.empty(n, np.int64)
    r, tau, g_first, left = 0, 0, 0, n
    while left > 0:
        done = 0  # requests completed by tau are the first ones
        while done < r and end[done] <= tau:
            done += 1
        if done:
            end[: r - done] = end[done:r].copy()
            off[: r - done] = off[done:r].copy()
            r -= done
        while g_left[g_first] == 0:
            g_first += 1
        c, seen, g = 0, 0, g_first  # candidates: the first 1 + lookahead live groups
        while g < n_groups and seen <= lookahead:
            if g_left[g] > 0:
                for k in range(g_start[g], g_start[g + 1]):
                    if waiting[k]:
                        cand[c] = k
                        c += 1
                seen += 1
            g += 1
        pick, p = cand[0], tau  # alone, every request fits: s + o <= M
        if r:
            _fit_tables(end, off, r, memory, suf_off, slack)
            # The earliest boundary wins, and at equal boundaries the earlier entry:
            # later entries only need searching strictly before the best found.
            pick, p = -1, end[0]
            for a in range(c):
                i = order[cand[a]]
                q = _earliest(end, suf_off, slack, r, s[i], o[i], memory, tau, p - 1)
                if q >= 0:
                    pick, p = cand[a], q
                    if q == tau:
                        break
            if pick < 0:  # nothing fits before the next completion
                tau = end[0]
                continue
        i = order[pick]
        waiting[pick] = False
        left -= 1
        g = g_first
        while g_start[g + 1] <= pick:
            g += 1
        g_left[g] -= 1
        tau = p
        starts[i] = p
        k = r  # insert by completion
        while k > 0 and end[k - 1] > p + o[i]:
            end[k], off[k] = end[k - 1], off[k - 1]
            k -= 1
        end[k], off[k] = p + o[i], s[i] - p
        r += 1
    return starts


def _earliest_fit(
    r_off: np.ndarray,
    r_end: np.ndarray,
    s: int,
    o: int,
    memory: int,
    lo: int,
    hi: int,
) -> int | None:
    """First boundary ``p`` in ``[lo, hi]`` at which a request ``(s, o)`` can start
    beside running requests holding ``r_off + t`` at step ``t`` and completing at
    ``r_end`` (all ``> hi``), or None."""
    if lo > hi:
        return None
    idx = np.argsort(r_end, kind="stable")
    end = np.ascontiguousarray(r_end[idx], dtype=np.int64)
    off = np.ascontiguousarray(r_off[idx], dtype=np.int64)
    r = end.size
    suf_off = np.empty(r + 1, dtype=np.int64)
    slack = np.empty(max(r, 1), dtype=np.int64)
    _fit_tables(end, off, r, memory, suf_off, slack)
    p = _earliest(end, suf_off, slack, r, s, o, memory, lo, hi)
    return None if p < 0 else int(p)


def _check_order(order: np.ndarray, n: int) -> np.ndarray:
    order = np.asarray(order, dtype=np.int64)
    if order.shape != (n,) or not np.array_equal(np.sort(order), np.arange(n)):
        raise ValueError("order must be a permutation of the request indices")
    return order


def admit_in_order(inst: Instance, order: np.ndarray) -> np.ndarray:
    """Start boundaries of every request when admitted in ``order`` (head-of-line)."""
    order = _check_order(order, inst.n)
    return _admit(inst.s, inst.o, inst.memory, order, np.arange(inst.n, dtype=np.int64), 0)


def admit_by_group(
    inst: Instance, order: np.ndarray, group: np.ndarray, lookahead: int = 0
) -> np.ndarray:
    """Start boundaries when admitting in ``order`` with skipping inside groups.

    ``group[k]`` is the group of the list's ``k``-th entry (non-decreasing). At every
    boundary the waiting entries of the earliest ``1 + lookahead`` groups that still
    have any are tried in list order, each admitted if it fits (the test of
    :func:`admit_in_order`): the earliest boundary at which any of them fits is
    taken, the first of them in list order that fits there starts, and the rest
    are re-tested with it running."""
    order = _check_order(order, inst.n)
    group = np.asarray(group, dtype=np.int64)
    if group.shape != order.shape or (np.diff(group) < 0).any():
        raise ValueError("group must give one non-decreasing group per list entry")
    if lookahead < 0:
        raise ValueError("lookahead must be >= 0")
    return _admit(inst.s, inst.o, inst.memory, order, group, int(lookahead))


def future_peak(held: np.ndarray, remaining: np.ndarray) -> int:
    """Highest future memory of running requests that hold ``held`` now and need
    ``remaining`` more steps each (no newcomers): ``max_d Σ_{r_k >= d} (held_k + d)``."""
    if len(held) == 0:
        return 0
    idx = np.argsort(-remaining, kind="stable")
    r = remaining[idx]
    return int((np.cumsum(held[idx]) + r * np.arange(1, len(r) + 1)).max())
