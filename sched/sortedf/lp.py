"""An interval-indexed LP relaxation: a lower bound on total latency, and an order.

Completion-time intervals ``(τ_{l-1}, τ_l]`` (unit width up to ``unit``, then
growing by a factor ``1 + eps``, never wider than ``max_width``) and a last one
``(τ_L, ∞)``. Variable ``y_il`` is the fraction of request ``i`` completing in
interval ``l``; it is 0 where ``τ_l < o_i``. With ``early`` (n <= 200), ``u_il`` in
``[0, y_il]`` is its *early share*: a completion at ``C`` in ``[a, b]``, with
``a = max(o_i, τ_{l-1} + 1)`` and ``b = τ_l``, is the mix ``u·a + (1 - u)·b``.

* Objective: ``Σ_il y_il · b - u_il · (b - a)`` (without ``early``: ``y_il · a``).
* Capacity rows, one per interval ``l`` and per *row family* ``f``: a function
  of the share ``x = v / M`` of the KV cache a request holds with ``Σ f(x) <= 1``
  whenever ``Σ x <= 1`` (a dual-feasible function; ``f(x) = x`` is the memory-area
  family). Every step's running requests hold ``Σ v <= M``, so summing over steps
  ``1..τ_l``: ``Σ_i Σ_l' y_il' · w_i(l, l') + u_il' · e_i(l, l') <= τ_l``. With
  ``W_i(k) = Σ_{j=1..k} f((s_i + j) / M)`` (the weight of a request's first ``k``
  steps) and ``g(C) = W_i(max(0, τ_l - C + o_i))`` (the weight by ``τ_l`` of a run
  completing at ``C > τ_l``): ``w_i(l, l') = W_i(o_i)`` for ``l' <= l`` (done by
  ``τ_l``), ``g(b)`` for ``l' > l``, and ``e_i(l, l') = (g(b - 1) - g(b))·(b - a)``;
  at most ``partial`` later intervals are counted, the rest as 0.

Why it is a lower bound: take any feasible schedule (an optimal one included),
set ``y_il = 1`` for the interval holding ``C_i`` and ``u_il = (b - C_i)/(b - a)``
there. In each of the steps ``1..τ_l`` the running requests' ``f`` sum to at most 1,
so at most ``τ_l`` in all. A request done by ``τ_l`` put all of ``W_i(o_i)`` there;
one completing at ``C`` in a later interval put ``g(C)``, and its row terms sum to
``g(b) + (g(b - 1) - g(b))·(b - C)``, the line through ``g`` at ``b - 1`` and ``b``,
which is below ``g`` because ``g`` is convex in ``C`` (``f`` is non-decreasing);
counting less only weakens a row. So every row holds, ``y`` sums to 1 per request,
and the objective term is ``C_i`` (at most ``C_i`` without ``early``). So the LP
optimum is at most the optimal total latency. Evictions do not help a schedule
(dropping an aborted run only frees memory), so it bounds schedules with
restarts too. docs/sortedf.md §3 has the full proof and why the families are
dual-feasible; tests/sched/sortedf/ check every row at exact optima.

Solved in cumulative form (``z_il = Σ_{l' <= l} y_il'``, ``z_il <= z_i,l+1``,
``u_il <= z_il - z_i,l-1``) by HiGHS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from servecal.sched.sortedf.model import Instance


@dataclass(frozen=True)
class LPResult:
    """The LP's optimum (a lower bound on total latency) and its fractional completions."""

    total: float
    mean: float
    expected_completion: np.ndarray
    intervals: int


#: LP resolution for tractable sizes (tighter, slower) and for large instances.
FINE_MAX_N = 200
FINE = {
    "unit": 8,
    "eps": 0.03,
    "max_vars": 200_000,
    "partial": 1 << 30,
    "families": ("area", "u1", "u2", "u3"),
    "nnz": 100_000,
    "early": True,
}
FAST = {
    "unit": 32,
    "eps": 0.05,
    "max_vars": 100_000,
    "partial": 8,
    "families": ("area",),
    "nnz": None,
    "early": False,
}


def width_cap(horizon: int, total_o: int, nnz: float | None) -> int | None:
    """Widest interval so that the partial terms stay near ``nnz`` nonzeros per row
    family: about ``(horizon / W) · (Σ o / W)`` of them with width ``W``."""
    if nnz is None:
        return None
    return max(1, int(np.ceil(np.sqrt(horizon * total_o / nnz))))


def breakpoints(horizon: int, unit: int, eps: float, max_width: int | None = None) -> np.ndarray:
    """``1, 2, .., unit`` then ``⌈τ·(1 + eps)⌉`` up to ``horizon`` (always includes it),
    no interval wider than ``max_width``."""
    pts = list(range(1, min(unit, horizon) + 1))
    t = float(pts[-1]) if pts else 1.0
    cap = np.inf if max_width is None else float(max_width)
    while pts[-1] < horizon:
        t = min(max(t * (1.0 + eps), pts[-1] + 1.0), pts[-1] + cap)
        pts.append(min(int(np.ceil(t)), horizon))
    return np.asarray(pts, dtype=np.int64)


def dff_u(k: int) -> Callable[[np.ndarray, int], np.ndarray]:
    """Fekete and Schepers' ``u^(k)``: ``x`` where ``(k + 1)·x`` is an integer, else
    ``⌊(k + 1)·x⌋ / k``, on ``x = v / M`` (integer arithmetic, so exact)."""

    def f(v: np.ndarray, memory: int) -> np.ndarray:
        q, r = np.divmod((k + 1) * v, memory)
        return np.where(r == 0, v / memory, q / k)

    return f


def dff_eps(num: int, den: int) -> Callable[[np.ndarray, int], np.ndarray]:
    """Fekete and Schepers' ``U^(ε)``, ``ε = num / den <= 1/2``: 1 above ``1 - ε``,
    ``x`` in ``[ε, 1 - ε]``, 0 below ``ε``."""

    def f(v: np.ndarray, memory: int) -> np.ndarray:
        small = v * den < num * memory
        big = v * den > (den - num) * memory
        return np.where(big, 1.0, np.where(small, 0.0, v / memory))

    return f


#: Per-step weight functions ``f(v, M)`` of a request holding ``v`` tokens, each a
#: dual-feasible function of ``v / M``: whatever runs in one step has ``Σ f <= 1``.
DFFS: dict[str, Callable[[np.ndarray, int], np.ndarray]] = {
    "area": lambda v, memory: v / memory,
    **{f"u{k}": dff_u(k) for k in range(1, 7)},
    **{f"e{d}": dff_eps(1, d) for d in (2, 3, 4, 5, 6, 8, 10)},
}


def _cumulative(
    inst: Instance, f: Callable[[np.ndarray, int], np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """``W_i(k) = Σ_{j=1..k} f(s_i + j)`` for ``k = 0..o_i``, flat, and each request's
    offset in it (``W_i(k)`` is ``flat[offset_i + k]``)."""
    o = inst.o
    off = np.concatenate([[0], np.cumsum(o + 1)[:-1]])
    rid = np.repeat(np.arange(inst.n), o + 1)
    j = np.arange(int((o + 1).sum())) - off[rid]
    w = np.where(j > 0, f(inst.s[rid] + j, inst.memory), 0.0)
    # cumsum within each request: global cumsum minus the value at each start.
    cw = np.cumsum(w)
    cw -= np.repeat(cw[off], o + 1)
    return cw, off


def _capacity_rows(
    inst: Instance,
    tau: np.ndarray,
    var: np.ndarray,
    f: Callable[[np.ndarray, int], np.ndarray],
    partial: int,
    early: bool,
) -> sp.csr_matrix:
    """One capacity row per interval for the family ``f`` (right-hand side ``τ_l``).

    With ``w(l, l')`` as in the module doc (``W_i(o_i)`` for ``l' <= l``, the partial
    weight for later intervals at their latest completion, 0 past ``partial`` of
    them) and ``y = z_l' - z_l'-1``, ``z_il'`` gets ``w(l, l') - w(l, l' + 1)``, which is
    ``>= 0``, and ``u_il'`` the early-completion extra ``e(l, l')``."""
    cw, off = _cumulative(inst, f)
    n, n_int = var.shape
    o = inst.o
    full = cw[off + o]
    rows, cols, vals = [], [], []
    o_max = int(o.max())
    for row in range(n_int):
        # Later intervals with τ_l' < τ_l + max o can hold a partial run (capped).
        reach = int(np.searchsorted(tau, tau[row] + o_max, side="left")) - row - 1
        ahead = np.arange(1, max(0, min(partial, reach)) + 1)
        nxt_l = row + ahead[None, :]
        valid = nxt_l < n_int
        tau_next = np.where(valid, tau[np.minimum(nxt_l, n_int - 1)], np.iinfo(np.int64).max // 4)
        # Steps run by τ_l when completing at τ_l' at the latest (< o_i since l' > l).
        k = np.clip(tau[row] - tau_next + o[:, None], 0, o[:, None])
        w = cw[off[:, None] + k]
        w_full = np.concatenate([full[:, None], w, np.zeros((n, 1))], axis=1)
        coef = w_full[:, :-1] - w_full[:, 1:]
        idx = np.concatenate([[row], row + ahead])
        keep = (idx < n_int)[None, :] & (coef > 1e-12)
        ii, kk = np.nonzero(keep)
        rows.append(np.full(ii.size, row))
        cols.append(var[ii, idx[kk]])
        vals.append(coef[ii, kk])
        if early and ahead.size:
            # Early-completion share u_il': the weight, as a function g(C) of the
            # completion C, is convex, so the line through g(b - 1) and g(b) stays
            # below it; at the interval's earliest completion a it adds
            # (g(b - 1) - g(b))·(b - a) to g(b).
            k1 = np.clip(tau[row] - tau_next + 1 + o[:, None], 0, o[:, None])
            first = np.maximum(tau[np.minimum(nxt_l - 1, n_int - 1)] + 1, o[:, None])
            extra = (cw[off[:, None] + k1] - w) * np.clip(tau_next - first, 0, None)
            ii, kk = np.nonzero(valid & (extra > 1e-12))
            rows.append(np.full(ii.size, row))
            cols.append(n * n_int + var[ii, row + ahead[kk]])
            vals.append(extra[ii, kk])
    return sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(n_int, (2 if early else 1) * n * n_int),
    )


@dataclass(frozen=True)
class LPModel:
    """The LP: minimise ``c·x + const`` subject to ``a_ub·x <= b_ub`` and
    ``0 <= x <= upper``, ``x = (z, u)`` (``u`` only with ``early``), each flattened
    from ``(n, intervals)`` (cumulative completion ``z``, early share ``u``);
    ``row_family`` names the family of each capacity row (the monotone and linking
    rows follow them)."""

    c: np.ndarray
    const: float
    a_ub: sp.csr_matrix
    b_ub: np.ndarray
    upper: np.ndarray
    tau: np.ndarray
    cost: np.ndarray
    cost_early: np.ndarray
    cost_last: np.ndarray
    row_family: tuple[str, ...]
    early: bool

    def indicator(self, completion: np.ndarray) -> np.ndarray:
        """The point of a schedule with these completion times: ``z_il = 1`` iff
        ``C_i <= τ_l``, and in ``C_i``'s interval ``(a, b]`` the early share
        ``u = (b - C_i) / (b - a')``, ``a' = max(a + 1, o_i)``, so that ``C_i`` is the
        mix ``u·a' + (1 - u)·b`` (only ``z`` when the model has no early shares)."""
        c = np.asarray(completion)
        n, n_int = len(c), len(self.tau)
        z = (c[:, None] <= self.tau[None, :]).astype(float)
        if not self.early:
            return z.ravel()
        u = np.zeros((n, n_int))
        l_c = np.searchsorted(self.tau, c, side="left")  # C's interval (n_int: the last)
        inside = l_c < n_int
        rid = np.flatnonzero(inside)
        b = self.tau[l_c[rid]].astype(float)
        a = self.cost_early[rid, l_c[rid]]
        u[rid, l_c[rid]] = np.where(b > a, (b - c[rid]) / np.maximum(b - a, 1), 0.0)
        return np.concatenate([z.ravel(), u.ravel()])


def build_lp(
    inst: Instance,
    horizon: int,
    unit: int | None = None,
    eps: float | None = None,
    max_vars: int | None = None,
    partial: int | None = None,
    max_width: int | None = None,
    families: tuple[str, ...] | None = None,
    early: bool | None = None,
) -> LPModel:
    """The LP with intervals up to ``horizon`` (any value keeps it a valid bound:
    completions after it cost ``horizon + 1`` in the last interval). ``eps`` (and the
    width cap) grow when ``n × intervals`` would exceed ``max_vars``, trading tightness
    for time. Unset knobs follow :data:`FINE` for ``n <= 200`` (tractable sizes) and
    :data:`FAST` above; ``families`` are names in :data:`DFFS`."""
    knobs = _knobs(inst.n, unit=unit, eps=eps, max_vars=max_vars, partial=partial,
                   families=families, early=early)  # fmt: skip
    families, partial, early = knobs["families"], knobs["partial"], knobs["early"]
    n = inst.n
    o = inst.o.astype(float)
    tau = _intervals(inst, horizon, knobs, max_width)
    n_int = len(tau)
    lower = np.concatenate([[1.0], tau[:-1] + 1.0])  # earliest completion in interval l
    # Completing in interval l costs its latest completion b = τ_l, less (b - a') for
    # the early share u (a' = max(τ_{l-1} + 1, o_i), the earliest); the last interval
    # (τ_L, ∞) costs its earliest, τ_L + 1.
    cost_early = np.maximum(o[:, None], lower[None, :])
    # Without the early share, each interval costs its earliest completion.
    cost = np.maximum(o[:, None], tau[None, :].astype(float)) if early else cost_early
    cost_last = np.maximum(o, tau[-1] + 1.0)
    nxt = np.concatenate([cost[:, 1:], cost_last[:, None]], axis=1)
    # Σ_l (z_l - z_{l-1}) c_l + (1 - z_L) c_last = Σ_l z_l (c_l - c_{l+1}) + c_last.
    c = (cost - nxt).ravel()
    upper = np.where(tau[None, :] >= o[:, None], 1.0, 0.0).ravel()
    var = np.arange(n * n_int).reshape(n, n_int)
    blocks = [_capacity_rows(inst, tau, var, DFFS[name], partial, early) for name in families]
    a_mono = _monotone_rows(var)
    m = a_mono.shape[0]
    nv = n * n_int
    b_ub = np.concatenate([tau.astype(float)] * len(families) + [np.zeros(m)])
    if not early:
        a_ub = sp.vstack([*blocks, a_mono], format="csr")
    else:
        # Early shares u after z; linking rows u_il <= y_il = z_il - z_i,l-1.
        link = _early_links(var)
        a_mono = sp.hstack([a_mono, sp.csr_matrix((m, nv))], format="csr")
        a_ub = sp.vstack([*blocks, a_mono, link], format="csr")
        b_ub = np.concatenate([b_ub, np.zeros(nv)])
        c = np.concatenate([c, -(cost - cost_early).ravel()])
        upper = np.concatenate([upper, upper])
    return LPModel(
        c=c,
        const=float(cost_last.sum()),
        a_ub=a_ub,
        b_ub=b_ub,
        upper=upper,
        tau=tau,
        cost=cost,
        cost_early=cost_early,
        cost_last=cost_last,
        row_family=tuple(name for name in families for _ in range(n_int)),
        early=early,
    )


def _knobs(n: int, **given: Any) -> dict[str, Any]:
    """The LP's knobs: each one given, else :data:`FINE`'s (``n <= 200``) or
    :data:`FAST`'s; unknown row families are a ``ValueError``."""
    defaults = FINE if n <= FINE_MAX_N else FAST
    knobs = {**defaults, **{k: v for k, v in given.items() if v is not None}}
    knobs["families"] = tuple(knobs["families"])
    unknown = [f for f in knobs["families"] if f not in DFFS]
    if unknown or not knobs["families"]:
        raise ValueError(f"unknown row families {unknown}; choose from {', '.join(DFFS)}")
    return knobs


def _intervals(
    inst: Instance, horizon: int, knobs: dict[str, Any], max_width: int | None
) -> np.ndarray:
    """The interval ends up to ``horizon``, coarsened (``eps`` and the width cap grow)
    until ``n × intervals`` fits ``max_vars``."""
    unit, eps = knobs["unit"], knobs["eps"]
    horizon = max(int(horizon), int(inst.o.max()))
    if max_width is None:
        max_width = width_cap(horizon, int(inst.o.sum()), knobs["nnz"])
    tau = breakpoints(horizon, unit, eps, max_width)
    while inst.n * len(tau) > knobs["max_vars"] and len(tau) > 8:
        eps *= 1.5
        unit = max(8, unit // 2)
        max_width = None if max_width is None else 2 * max_width
        tau = breakpoints(horizon, unit, eps, max_width)
    return tau


def _monotone_rows(var: np.ndarray) -> sp.csr_matrix:
    """Rows z_il - z_i,l+1 <= 0 (a request completed by interval l stays completed)."""
    left = var[:, :-1].ravel()
    right = var[:, 1:].ravel()
    m = left.size
    return sp.csr_matrix(
        (
            np.concatenate([np.ones(m), -np.ones(m)]),
            (np.tile(np.arange(m), 2), np.concatenate([left, right])),
        ),
        shape=(m, var.size),
    )


def _early_links(var: np.ndarray) -> sp.csr_matrix:
    """Rows u_il <= y_il = z_il - z_i,l-1 over (z, u), the early shares u after z."""
    nv = var.size
    n_int = var.shape[1]
    cur = var.ravel()
    has_prev = (cur % n_int) > 0
    return sp.csr_matrix(
        (
            np.concatenate([np.ones(nv), -np.ones(nv), np.ones(int(has_prev.sum()))]),
            (
                np.concatenate([cur, cur, cur[has_prev]]),
                np.concatenate([nv + cur, cur, cur[has_prev] - 1]),
            ),
        ),
        shape=(nv, 2 * nv),
    )


def lp_relaxation(inst: Instance, horizon: int, **knobs: Any) -> LPResult:
    """Solve :func:`build_lp` (``knobs``: its keyword arguments) with HiGHS: the bound
    and the LP's expected completion time of every request."""
    n = inst.n
    if n == 0:
        return LPResult(0.0, 0.0, np.zeros(0), 0)
    lp = build_lp(inst, horizon, **knobs)
    bounds = np.stack([np.zeros_like(lp.upper), lp.upper], axis=1)
    res = linprog(lp.c, A_ub=lp.a_ub, b_ub=lp.b_ub, bounds=bounds, method="highs")
    if res.status != 0:
        raise RuntimeError(f"LP relaxation failed: {res.message}")
    n_int = len(lp.tau)
    z = np.clip(res.x[: n * n_int].reshape(n, n_int), 0.0, 1.0)
    u = np.clip(res.x[n * n_int :].reshape(n, n_int), 0.0, 1.0) if lp.early else 0.0
    y = np.diff(np.concatenate([np.zeros((n, 1)), z], axis=1), axis=1)
    expected = (
        (y * lp.cost).sum(axis=1)
        - (u * (lp.cost - lp.cost_early)).sum(axis=1)
        + (1.0 - z[:, -1]) * lp.cost_last
    )
    total = float(res.fun + lp.const)
    return LPResult(total=total, mean=total / n, expected_completion=expected, intervals=n_int)


def lp_order(inst: Instance, result: LPResult) -> np.ndarray:
    """Sorted-LP's priority list: ascending LP completion, then ``o``, then ``s``."""
    return np.lexsort((inst.s, inst.o, np.round(result.expected_completion, 9)))
