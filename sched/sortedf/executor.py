"""Continuous batching from a priority list, with known output lengths.

Two admission rules share one exact fit test (with a newcomer, memory stays
``<= M`` at every future completion time of the running requests and of itself;
memory only rises between completions, so those are the only times to check).
Because the test is exact, no schedule here ever needs an eviction.

* :func:`execute_order`, *head-of-line* (MC-SF, Sorted-LP, Sorted-F with
  ``phase2="head"``): at every boundary the head of the list is admitted if it
  fits; otherwise nothing further down the list is tried (as MC-SF says: "stop at
  the first that does not fit").
* :func:`execute_groups`, *skipping within a group* (Sorted-F's default
  ``phase2="batch"``, a group being a Phase-1 batch): at every boundary the
  waiting entries of the earliest group that still has any (and of the next
  ``lookahead`` groups) are tried in list order, and each that fits is admitted.
  One group per entry is head-of-line again; one group for all is unrestricted
  skipping.

Both are event-driven: between two completions the running set is fixed, so the
earliest boundary at which a candidate fits is found in one vectorised pass
instead of stepping through time.
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


def _earliest_fits(
    r_off: np.ndarray,
    r_end: np.ndarray,
    s: np.ndarray,
    o: np.ndarray,
    memory: int,
    lo: int,
    hi: int,
) -> np.ndarray:
    """:func:`_earliest_fit` for many candidates at once (``-1`` where none fits in
    ``[lo, hi]``): the same two tests, on a candidates × boundaries grid."""
    order = np.argsort(r_end, kind="stable")
    end = r_end[order]
    off = r_off[order]
    suf_off = np.concatenate([np.cumsum(off[::-1])[::-1], [0]])
    suf_cnt = np.arange(len(end), -1, -1)
    first = np.searchsorted(end, end, side="left")
    slack = memory - (suf_off[first] + end * suf_cnt[first])
    width = hi - lo + 1
    c = len(s)
    bad_lo = np.maximum(end[None, :] - o[:, None], lo)  # (c, r)
    bad_hi = np.minimum(end[None, :] + s[:, None] - slack[None, :] - 1, hi)
    hit = bad_lo <= bad_hi
    rows = np.broadcast_to(np.arange(c)[:, None], hit.shape)[hit]
    diff = np.zeros((c, width + 1), dtype=np.int64)
    np.add.at(diff, (rows, bad_lo[hit] - lo), 1)
    np.add.at(diff, (rows, bad_hi[hit] - lo + 1), -1)
    ok = np.cumsum(diff[:, :width], axis=1) == 0
    t = np.arange(lo, hi + 1, dtype=np.int64)[None, :] + o[:, None]  # own completion
    idx = np.searchsorted(end, t, side="left")
    ok &= suf_off[idx] + t * suf_cnt[idx] + (s + o)[:, None] <= memory
    found = ok.any(axis=1)
    return np.where(found, lo + ok.argmax(axis=1), -1)


def execute_groups(
    inst: Instance, order: np.ndarray, group: np.ndarray, lookahead: int = 0
) -> np.ndarray:
    """Start boundaries when admitting in ``order`` with skipping inside groups.

    ``group[k]`` is the group of the list's ``k``-th entry (non-decreasing). At every
    boundary the waiting entries of the earliest ``1 + lookahead`` groups that still
    have any are tried in list order, each admitted if it fits (the test of
    :func:`execute_order`). Exact and event-driven: between two completions the
    earliest boundary at which each candidate fits is computed at once; the first
    such boundary is taken, the first candidate in list order that fits there
    starts, and the rest are re-tested with it running."""
    s, o, memory = inst.s, inst.o, inst.memory
    n = inst.n
    order = np.asarray(order, dtype=np.int64)
    group = np.asarray(group, dtype=np.int64)
    if sorted(order.tolist()) != list(range(n)):
        raise ValueError("order must be a permutation of the request indices")
    if group.shape != order.shape or (np.diff(group) < 0).any():
        raise ValueError("group must give one non-decreasing group per list entry")
    if lookahead < 0:
        raise ValueError("lookahead must be >= 0")
    starts = np.full(n, -1, dtype=np.int64)
    r_off = np.zeros(0, dtype=np.int64)
    r_end = np.zeros(0, dtype=np.int64)
    bounds = np.flatnonzero(np.diff(group)) + 1
    pending = [part.tolist() for part in np.split(order, bounds) if part.size]
    tau = 0
    while pending:
        live = r_end > tau
        if not live.all():
            r_off, r_end = r_off[live], r_end[live]
        window = pending[: lookahead + 1]
        cand = np.asarray([i for part in window for i in part], dtype=np.int64)
        if r_end.size == 0:
            pick, p = 0, tau  # alone every request fits: s + o <= M
        else:
            fits = _earliest_fits(r_off, r_end, s[cand], o[cand], memory, tau, int(r_end.min()) - 1)
            if (fits < 0).all():
                tau = int(r_end.min())
                continue
            p = int(fits[fits >= 0].min())
            pick = int(np.flatnonzero(fits == p)[0])
        i = int(cand[pick])
        for part in window:
            if i in part:
                part.remove(i)
                break
        pending = [part for part in pending if part]
        tau = p
        starts[i] = p
        r_off = np.append(r_off, s[i] - p)
        r_end = np.append(r_end, p + o[i])
    return starts


def future_peak(held: np.ndarray, remaining: np.ndarray) -> int:
    """Highest future memory of running requests that hold ``held`` now and need
    ``remaining`` more steps each (no newcomers): ``max_d Σ_{r_k >= d} (held_k + d)``."""
    if len(held) == 0:
        return 0
    idx = np.argsort(-remaining, kind="stable")
    r = remaining[idx]
    return int((np.cumsum(held[idx]) + r * np.arange(1, len(r) + 1)).max())
