"""Continuous batching from a priority list, with known output lengths.

This is Phase 2 of Sorted-F and the whole of MC-SF and Sorted-LP: at every
boundary the head of the list is admitted if, with it, memory stays ``<= M`` at
every future completion time of the running requests and of itself (memory only
rises between completions, so those are the only times to check); otherwise
nothing further down the list is tried (head-of-line order, as MC-SF says: "stop
at the first that does not fit"). Because the admission test is exact, the
schedule never needs an eviction.

Event-driven: between two completions the running set is fixed, so the earliest
boundary at which the head fits is found in one vectorised pass instead of
stepping through time.
"""

from __future__ import annotations

import numpy as np

from servecal.sched.sortedf.model import Instance


def _earliest_fit(
    r_off: np.ndarray,
    r_end: np.ndarray,
    s: int,
    o: int,
    memory: int,
    lo: int,
    hi: int,
) -> int | None:
    """First boundary ``p`` in ``[lo, hi]`` at which a request ``(s, o)`` can start.

    ``r_off[k] = s_k - S_k`` and ``r_end[k] = C_k`` describe the running requests,
    all of which are still running through ``hi`` (``C_k > hi``). At step ``t`` a
    running request holds ``r_off + t``; the newcomer started at ``p`` holds
    ``s + t - p`` for ``p < t <= p + o``.
    """
    if lo > hi:
        return None
    order = np.argsort(r_end, kind="stable")
    end = r_end[order]
    off = r_off[order]
    # Suffix sums: requests with C >= end[k] are exactly positions k.. (after sorting).
    suf_off = np.concatenate([np.cumsum(off[::-1])[::-1], [0]])
    suf_cnt = np.arange(len(end), -1, -1)
    first = np.searchsorted(end, end, side="left")
    usage_at_end = suf_off[first] + end * suf_cnt[first]
    slack = memory - usage_at_end
    # At t = C_k the newcomer holds s + C_k - p if it is still running (p >= C_k - o);
    # this breaks the cap while p < C_k + s - slack_k.
    bad_lo = np.maximum(end - o, lo)
    bad_hi = np.minimum(end + s - slack - 1, hi)
    hit = bad_lo <= bad_hi
    width = hi - lo + 1
    diff = np.zeros(width + 1, dtype=np.int64)
    np.add.at(diff, bad_lo[hit] - lo, 1)
    np.add.at(diff, bad_hi[hit] - lo + 1, -1)
    ok = np.cumsum(diff[:width]) == 0
    # At its own completion t = p + o the newcomer holds s + o.
    p = np.arange(lo, hi + 1, dtype=np.int64)
    t = p + o
    idx = np.searchsorted(end, t, side="left")
    ok &= suf_off[idx] + t * suf_cnt[idx] + s + o <= memory
    where = np.flatnonzero(ok)
    return int(lo + where[0]) if where.size else None


def execute_order(inst: Instance, order: np.ndarray) -> np.ndarray:
    """Start boundaries of every request when admitted in ``order`` (see module doc)."""
    s, o, memory = inst.s, inst.o, inst.memory
    n = inst.n
    order = np.asarray(order, dtype=np.int64)
    if sorted(order.tolist()) != list(range(n)):
        raise ValueError("order must be a permutation of the request indices")
    starts = np.full(n, -1, dtype=np.int64)
    r_off = np.zeros(0, dtype=np.int64)
    r_end = np.zeros(0, dtype=np.int64)
    tau = 0
    head = 0
    while head < n:
        live = r_end > tau
        if not live.all():
            r_off, r_end = r_off[live], r_end[live]
        i = int(order[head])
        if r_end.size == 0:
            p: int | None = tau  # alone it always fits: s + o <= M
        else:
            p = _earliest_fit(r_off, r_end, int(s[i]), int(o[i]), memory, tau, int(r_end.min()) - 1)
        if p is None:
            tau = int(r_end.min())
            continue
        tau = p
        starts[i] = p
        r_off = np.append(r_off, s[i] - p)
        r_end = np.append(r_end, p + o[i])
        head += 1
    return starts


def future_peak(held: np.ndarray, remaining: np.ndarray) -> int:
    """Highest future memory of running requests that hold ``held`` now and need
    ``remaining`` more steps each (no newcomers): ``max_d Σ_{r_k >= d} (held_k + d)``."""
    if len(held) == 0:
        return 0
    idx = np.argsort(-remaining, kind="stable")
    r = remaining[idx]
    return int((np.cumsum(held[idx]) + r * np.arange(1, len(r) + 1)).max())
