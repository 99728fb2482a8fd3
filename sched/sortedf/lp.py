"""An interval-indexed LP relaxation: a lower bound on total latency, and an order.

Completion-time intervals ``(τ_{l-1}, τ_l]`` (unit width up to ``unit``, then
growing by a factor ``1 + eps``) and a last one ``(τ_L, ∞)``. Variable ``y_il`` is the
fraction of request ``i`` completing in interval ``l``; it is 0 where ``τ_l < o_i``.

* Objective: ``Σ_il y_il · max(o_i, τ_{l-1} + 1)``, the earliest completion the
  interval allows.
* Work rows, one per ``l``: ``Σ_i Σ_l' y_il' · w_i(l, l') <= M·τ_l``. A request holds
  ``s_i + j`` in its ``j``-th step, so its first ``k`` steps cost
  ``A_i(k) = k·s_i + k(k+1)/2`` token-steps; ``w_i(l, l') = A_i(o_i) = a_i`` when
  ``l' <= l`` (done by ``τ_l``) and ``A_i(max(0, τ_l - τ_l' + o_i))`` when ``l' > l`` (a
  request completing at ``C <= τ_l'`` has run at least ``τ_l - τ_l' + o_i`` steps by
  ``τ_l``); at most ``partial`` later intervals are counted, the rest as 0.

Why it is a lower bound: take any feasible schedule (an optimal one included) and
set ``y_il = 1`` for the interval holding ``C_i``. Steps ``1..τ_l`` hold at most
``M`` each, so at most ``M·τ_l`` token-steps, and they contain at least
``w_i(l, l')`` of request ``i`` (all of it if it is done, at least its first
``τ_l - τ_l' + o_i`` steps otherwise; counting less only weakens the row), so every
row holds; ``y`` sums to 1 per request; each objective term is at most ``C_i``
(``C_i >= o_i``, ``C_i > τ_{l-1}`` in interval ``l``). So the LP optimum is at most
the optimal total latency. Evictions do not help a schedule (dropping an aborted
run only frees memory), so it bounds schedules with restarts too. Checked
against the exact optimum in tests/sched/sortedf/test_sortedf_optimum.py.

Solved in cumulative form (``z_il = Σ_{l' <= l} y_il'``, ``z_il <= z_i,l+1``) by HiGHS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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
FINE = {"unit": 8, "eps": 0.03, "max_vars": 200_000, "partial": 1 << 30, "families": ("area",)}
FAST = {"unit": 32, "eps": 0.05, "max_vars": 100_000, "partial": 8, "families": ("area",)}


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


def _cumulative(inst: Instance, f: Callable[[np.ndarray, int], np.ndarray]):
    """``W_i(k) = Σ_{j=1..k} f(s_i + j)`` for ``k = 0..o_i``, flat, with offsets."""
    o = inst.o
    off = np.concatenate([[0], np.cumsum(o + 1)[:-1]])
    rid = np.repeat(np.arange(inst.n), o + 1)
    j = np.arange(int((o + 1).sum())) - off[rid]
    w = np.where(j > 0, f(inst.s[rid] + j, inst.memory), 0.0)
    # cumsum within each request: global cumsum minus the value at each start.
    cw = np.cumsum(w)
    cw -= np.repeat(cw[off], o + 1)
    return cw, off


def _capacity_rows(inst, tau, var, cum, partial):
    cw, off = cum
    n, n_int = var.shape
    o = inst.o
    full = cw[off + o]
    rows, cols, vals = [], [], []
    o_max = int(o.max())
    for row in range(n_int):
        reach = int(np.searchsorted(tau, tau[row] + o_max, side="left")) - row - 1
        ahead = np.arange(1, max(0, min(partial, reach)) + 1)
        nxt_l = row + ahead[None, :]
        valid = nxt_l < n_int
        tau_next = np.where(valid, tau[np.minimum(nxt_l, n_int - 1)], np.iinfo(np.int64).max // 4)
        k = np.clip(tau[row] - tau_next + o[:, None], 0, None)
        k = np.minimum(k, o[:, None])
        w = cw[off[:, None] + k]
        w_full = np.concatenate([full[:, None], w, np.zeros((n, 1))], axis=1)
        coef = w_full[:, :-1] - w_full[:, 1:]
        idx = np.concatenate([[row], row + ahead])
        keep = (idx < n_int)[None, :] & (coef > 1e-12)
        ii, kk = np.nonzero(keep)
        rows.append(np.full(ii.size, row))
        cols.append(var[ii, idx[kk]])
        vals.append(coef[ii, kk])
    a = sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(n_int, n * n_int),
    )
    return a, tau.astype(float)


def lp_relaxation(
    inst: Instance,
    horizon: int,
    unit: int | None = None,
    eps: float | None = None,
    max_vars: int | None = None,
    partial: int | None = None,
    max_width: int | None = None,
    families: tuple[str, ...] | None = None,
) -> LPResult:
    """Solve the LP with intervals up to ``horizon`` (any value keeps it a valid bound:
    completions after it cost ``horizon + 1`` in the last interval). ``eps`` is raised
    when ``n × intervals`` would exceed ``max_vars``, trading tightness for time. Unset
    knobs follow :data:`FINE` for ``n <= 200`` (tractable sizes) and :data:`FAST` above."""
    knobs = FINE if inst.n <= FINE_MAX_N else FAST
    unit = knobs["unit"] if unit is None else unit
    eps = knobs["eps"] if eps is None else eps
    max_vars = knobs["max_vars"] if max_vars is None else max_vars
    partial = knobs["partial"] if partial is None else partial
    families = knobs["families"] if families is None else families
    n = inst.n
    if n == 0:
        return LPResult(0.0, 0.0, np.zeros(0), 0)
    o = inst.o.astype(float)
    horizon = max(int(horizon), int(inst.o.max()))
    tau = breakpoints(horizon, unit, eps, max_width)
    while n * len(tau) > max_vars and len(tau) > 8:
        eps *= 1.5
        unit = max(8, unit // 2)
        max_width = None if max_width is None else 2 * max_width
        tau = breakpoints(horizon, unit, eps, max_width)
    n_int = len(tau)
    lower = np.concatenate([[1.0], tau[:-1] + 1.0])  # earliest completion in interval l
    # c_il for l = 1..L, and the last interval (tau_L, inf).
    cost = np.maximum(o[:, None], lower[None, :])
    cost_last = np.maximum(o, tau[-1] + 1.0)
    nxt = np.concatenate([cost[:, 1:], cost_last[:, None]], axis=1)
    # Σ_l (z_l - z_{l-1}) c_l + (1 - z_L) c_last = Σ_l z_l (c_l - c_{l+1}) + c_last.
    c = (cost - nxt).ravel()
    ub = np.where(tau[None, :] >= o[:, None], 1.0, 0.0).ravel()
    var = np.arange(n * n_int).reshape(n, n_int)
    blocks = [
        _capacity_rows(inst, tau, var, _cumulative(inst, DFFS[name]), partial) for name in families
    ]
    # Monotone rows: z_il - z_i,l+1 <= 0.
    left = var[:, :-1].ravel()
    right = var[:, 1:].ravel()
    m = left.size
    a_mono = sp.csr_matrix(
        (
            np.concatenate([np.ones(m), -np.ones(m)]),
            (np.tile(np.arange(m), 2), np.concatenate([left, right])),
        ),
        shape=(m, n * n_int),
    )
    a_ub = sp.vstack([b[0] for b in blocks] + [a_mono], format="csr")
    b_ub = np.concatenate([b[1] for b in blocks] + [np.zeros(m)])
    res = linprog(
        c, A_ub=a_ub, b_ub=b_ub, bounds=np.stack([np.zeros_like(ub), ub], axis=1), method="highs"
    )
    if res.status != 0:
        raise RuntimeError(f"LP relaxation failed: {res.message}")
    z = np.clip(res.x.reshape(n, n_int), 0.0, 1.0)
    y = np.diff(np.concatenate([np.zeros((n, 1)), z], axis=1), axis=1)
    y_last = 1.0 - z[:, -1]
    expected = (y * cost).sum(axis=1) + y_last * cost_last
    total = float(res.fun + cost_last.sum())
    return LPResult(total=total, mean=total / n, expected_completion=expected, intervals=n_int)


def lp_order(inst: Instance, result: LPResult) -> np.ndarray:
    """Sorted-LP's priority list: ascending LP completion, then ``o``, then ``s``."""
    return np.lexsort((inst.s, inst.o, np.round(result.expected_completion, 9)))
