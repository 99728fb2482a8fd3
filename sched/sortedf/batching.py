"""Sorted-F Phase 1: repeatedly pick the feasible batch minimising F(X) = Σ o_i / |X|².

A batch is *feasible* when its requests, started together, fit at every step:
``max_j Σ_{i∈X, o_i >= j} (s_i + j) <= M`` (:func:`~.model.batch_peak`). Three
solvers of the one-batch problem, chosen by instance size (``solver="auto"``):

* ``dp`` (n <= 100), exact. With requests in descending ``o``, the check at
  ``j = o_k`` involves exactly the requests taken so far, so a request can be added
  iff ``Σs_taken + s_k + o_k·(count + 1) <= M``. The DP over (count, Σs) keeps the
  least Σo; for each count ``c`` the best feasible Σo gives ``F = Σo / c²``.
  Time ``O(n·K·M)`` per batch, ``K`` the largest feasible batch size.
* ``swap`` (n <= 500): a quantile-greedy start improved by pairwise exchanges
  (swap an in-batch request for an outside one with smaller ``o``), additions and
  removals while F falls.
* ``quantile`` (larger n): drop outliers above quantiles of ``o`` and ``s``, take
  the rest in ascending ``o`` as long as the batch stays feasible (binary search on
  the prefix length), keep the prefix with the smallest F; best over a small grid
  of quantiles. ``O(n log n)`` per batch.

Ties in F go to the larger batch. Inside a batch requests are sorted by ``o``.
"""

from __future__ import annotations

import numpy as np

from servecal.sched.sortedf.model import batch_peak

SOLVERS = ("auto", "dp", "swap", "quantile")
DP_MAX_N = 100
SWAP_MAX_N = 500
_QUANTILES_O = (0.25, 0.5, 0.75, 1.0)
_QUANTILES_S = (0.5, 0.75, 1.0)


def f_value(o: np.ndarray) -> float:
    """``F(X) = Σ o / |X|²`` (infinite for the empty batch)."""
    return float(o.sum()) / len(o) ** 2 if len(o) else float("inf")


def is_feasible(s: np.ndarray, o: np.ndarray, memory: int) -> bool:
    return batch_peak(s, o) <= memory


#: The DP's table is (largest batch) × M per request; above this many cells per
#: request ``auto`` uses the swap search even for n <= 100 (e.g. M = 500k online).
DP_MAX_CELLS = 5_000_000


def choose_solver(n: int, memory: int | None = None, s: np.ndarray | None = None) -> str:
    """By size: ``dp`` for n <= 100 (unless its table would be huge), ``swap`` for
    n <= 500, ``quantile`` above."""
    if n <= DP_MAX_N:
        if memory is None or s is None or _max_batch_size(s, memory) * memory <= DP_MAX_CELLS:
            return "dp"
        return "swap"
    if n <= SWAP_MAX_N:
        return "swap"
    return "quantile"


def _max_batch_size(s: np.ndarray, memory: int) -> int:
    """Upper bound on any feasible batch: it must hold Σ(s + 1) at step 1."""
    need = np.cumsum(np.sort(s) + 1)
    return int(np.searchsorted(need, memory, side="right"))


def dp_best_batch(s: np.ndarray, o: np.ndarray, memory: int) -> np.ndarray:
    """Exact minimiser of F over feasible batches (indices into ``s``/``o``)."""
    n = len(o)
    kmax = min(n, _max_batch_size(s, memory))
    order = np.argsort(-o, kind="stable")
    big = np.iinfo(np.int64).max // 4
    best = np.full((kmax + 1, memory + 1), big, dtype=np.int64)
    best[0, 0] = 0
    masks: dict[tuple[int, int], np.ndarray] = {}
    for pos, k in enumerate(order):
        sk, ok_ = int(s[k]), int(o[k])
        for c in range(min(pos, kmax - 1), -1, -1):
            lim = memory - sk - ok_ * (c + 1)
            if lim < 0:
                continue
            cand = best[c, : lim + 1] + ok_
            dst = best[c + 1, sk : sk + lim + 1]
            better = cand < dst
            if better.any():
                dst[better] = cand[better]
                masks[(pos, c)] = np.packbits(better)
    totals = best[1:].min(axis=1)
    sizes = np.arange(1, kmax + 1)
    feasible = totals < big
    score = np.where(feasible, totals / sizes.astype(float) ** 2, np.inf)
    # Smallest F; among equal F the largest batch.
    c = int(sizes[np.flatnonzero(score == score.min())[-1]])
    m = int(np.argmin(best[c]))
    chosen = []
    pos = n - 1
    while c > 0:
        mask = masks.get((pos, c - 1))
        sk = int(s[order[pos]])
        idx = m - sk
        if mask is not None and 0 <= idx < 8 * len(mask) and np.unpackbits(mask)[idx]:
            chosen.append(int(order[pos]))
            c -= 1
            m -= sk
        pos -= 1
    return np.asarray(chosen, dtype=np.int64)


def _prefix_ok(s_sorted: np.ndarray, o_sorted: np.ndarray, r: int, memory: int) -> bool:
    """Is the prefix of length ``r`` of an ascending-``o`` list feasible?"""
    # Position k (0-based) sees every request from k to r-1 (o >= o_k there).
    ss = s_sorted[:r]
    tail = np.cumsum(ss[::-1])[::-1]
    return bool((tail + o_sorted[:r] * np.arange(r, 0, -1)).max() <= memory)


def _best_prefix(idx: np.ndarray, s: np.ndarray, o: np.ndarray, memory: int) -> np.ndarray:
    """Among feasible prefixes of ``idx`` (ascending ``o``), the one with least F."""
    ss, oo = s[idx], o[idx]
    lo, hi = 0, len(idx)  # prefix lo is feasible; find the longest
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _prefix_ok(ss, oo, mid, memory):
            lo = mid
        else:
            hi = mid - 1
    if lo == 0:
        return idx[:0]
    f = np.cumsum(oo[:lo]) / np.arange(1, lo + 1, dtype=float) ** 2
    r = int(np.flatnonzero(f == f.min())[-1]) + 1
    return idx[:r]


def _fill(chosen: np.ndarray, s: np.ndarray, o: np.ndarray, memory: int, tries: int) -> np.ndarray:
    """Greedily add outside requests (ascending ``o``) that keep it feasible and lower F."""
    inside = np.zeros(len(o), dtype=bool)
    inside[chosen] = True
    outside = np.flatnonzero(~inside)
    outside = outside[np.argsort(o[outside], kind="stable")][:tries]
    cur = list(chosen)
    total = int(o[chosen].sum())
    for j in outside:
        c = len(cur)
        if (total + o[j]) * c * c >= total * (c + 1) ** 2:
            break  # ascending o: no later candidate lowers F either
        trial = np.asarray(cur + [int(j)])
        if is_feasible(s[trial], o[trial], memory):
            cur.append(int(j))
            total += int(o[j])
    return np.asarray(cur, dtype=np.int64)


def quantile_best_batch(s: np.ndarray, o: np.ndarray, memory: int) -> np.ndarray:
    """Quantile greedy (see module doc)."""
    base = np.lexsort((s, o))  # ascending o, then s
    qo = np.quantile(o, _QUANTILES_O)
    qs = np.quantile(s, _QUANTILES_S)
    best, best_f = base[:1], f_value(o[base[:1]])
    for a in qo:
        for b in qs:
            idx = base[(o[base] <= a) & (s[base] <= b)]
            if idx.size == 0:
                continue
            cand = _best_prefix(idx, s, o, memory)
            f = f_value(o[cand])
            if f < best_f or (f == best_f and len(cand) > len(best)):
                best, best_f = cand, f
    return _fill(best, s, o, memory, tries=64)


def swap_best_batch(
    s: np.ndarray, o: np.ndarray, memory: int, max_passes: int = 20, probe: int = 8
) -> np.ndarray:
    """Local search from the quantile-greedy batch: swaps, additions, removals."""
    n = len(o)
    inside = np.zeros(n, dtype=bool)
    inside[quantile_best_batch(s, o, memory)] = True
    for _ in range(max_passes):
        improved = False
        members = np.flatnonzero(inside)
        for i in members[np.argsort(-o[members], kind="stable")]:
            outside = np.flatnonzero(~inside)
            smaller = outside[o[outside] < o[i]]
            if smaller.size == 0:
                continue
            # Dominated replacements (s_j <= s_i and o_j < o_i) are always feasible.
            dom = smaller[s[smaller] <= s[i]]
            pick = int(dom[np.argmin(o[dom])]) if dom.size else -1
            rest = smaller[s[smaller] > s[i]]
            rest = rest[np.argsort(o[rest], kind="stable")][:probe]
            for j in rest:
                if pick >= 0 and o[j] >= o[pick]:
                    break
                inside[i], inside[j] = False, True
                ok = is_feasible(s[inside], o[inside], memory)
                inside[i], inside[j] = True, False
                if ok:
                    pick = int(j)
                    break
            if pick >= 0:
                inside[i], inside[pick] = False, True
                improved = True
        members = np.flatnonzero(inside)
        grown = _fill(members, s, o, memory, tries=probe * 4)
        if len(grown) > len(members):
            inside[grown] = True
            improved = True
        # Dropping the largest o lowers F when o_max > (2c - 1)/c² · Σo... test directly.
        members = np.flatnonzero(inside)
        while len(members) > 1:
            top = members[np.argmax(o[members])]
            rest = members[members != top]
            if f_value(o[rest]) < f_value(o[members]):
                inside[top] = False
                members = rest
                improved = True
            else:
                break
        if not improved:
            break
    return np.flatnonzero(inside)


def best_batch(s: np.ndarray, o: np.ndarray, memory: int, solver: str) -> np.ndarray:
    if solver == "dp":
        return dp_best_batch(s, o, memory)
    if solver == "swap":
        return swap_best_batch(s, o, memory)
    if solver == "quantile":
        return quantile_best_batch(s, o, memory)
    raise ValueError(f"unknown Phase-1 solver {solver!r}; choose from {', '.join(SOLVERS)}")


def as_list(batches: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The Phase-1 list that Phase 2 runs: the batches concatenated, and each
    entry's batch number (non-decreasing)."""
    if not batches:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    sizes = [len(b) for b in batches]
    return np.concatenate(batches), np.repeat(np.arange(len(batches)), sizes)


def form_batches(
    s: np.ndarray, o: np.ndarray, memory: int, solver: str = "auto"
) -> list[np.ndarray]:
    """Phase 1: the batches in the order chosen, each sorted by ascending ``o``."""
    if solver not in SOLVERS:
        raise ValueError(f"unknown Phase-1 solver {solver!r}; choose from {', '.join(SOLVERS)}")
    if solver == "auto":
        solver = choose_solver(len(o), memory, s)
    left = np.arange(len(o))
    batches = []
    while left.size:
        pick = best_batch(s[left], o[left], memory, solver)
        if pick.size == 0:  # cannot happen when every s + o <= M; keep progress anyway
            pick = np.asarray([int(np.argmin(o[left]))])
        chosen = left[pick]
        batches.append(chosen[np.argsort(o[chosen], kind="stable")])
        keep = np.ones(left.size, dtype=bool)
        keep[pick] = False
        left = left[keep]
    return batches
