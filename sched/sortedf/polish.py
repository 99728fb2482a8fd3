"""Polish a Sorted-F list by local search on the true objective.

Phase 1 forms batches by a proxy (``F(X) = Σo / |X|²``); what a list is worth is
only known once Phase 2 has run it. Offline every output length is known, so the
list can be improved against the real objective: this hill-climbs over the
Phase-1 list (its order and its batch boundaries) and scores every candidate list
by running it exactly (:func:`best_starts`, the ``best`` Phase 2), keeping a move
when the total latency does not grow (ties are taken, to cross plateaus).

Moves stay local, within ``window`` places: swap two entries (each keeps its
place's batch), or take one entry out and put it back elsewhere, joining the
batch of the place it lands on (batch ids stay non-decreasing along the list).
The search is deterministic for a seed and a number of moves. A move costs about
one compiled Phase-2 run (:mod:`.executor`): 0.23 ms at n = 25 to 3.7 ms at
n = 200 and M = 65,536 on this host (``benchmarks/sortedf.py --gap --polish
100000`` prints ms/move), so 10⁵ moves take 20–370 s there, and the gain keeps
coming slowly for tens of thousands of moves (``--polish-curve``). It is off by
default: its cost grows with n (one run takes 1–2 ms at n = 2000 in the timing
table of ``benchmarks/sortedf.py``), and it is meant for n in the hundreds.
"""

from __future__ import annotations

import numpy as np

from servecal.sched.sortedf.admission import admit_by_group, admit_in_order
from servecal.sched.sortedf.model import Instance

#: Look-ahead depths the ``best`` Phase 2 tries beyond the one asked for (on the gap
#: benchmark's M = 8,192 instances each of 1-4 batches wins somewhere).
EXTRA_LOOKAHEAD = 3


def _run(inst: Instance, order: np.ndarray, group: np.ndarray, rule: int | None) -> np.ndarray:
    """Start boundaries of one Phase-2 rule: ``batch`` with ``rule`` batches of
    look-ahead, or head-of-line (``None``)."""
    if rule is None:
        return admit_in_order(inst, order)
    return admit_by_group(inst, order, group, rule)


def _best(
    inst: Instance, order: np.ndarray, group: np.ndarray, lookahead: int
) -> tuple[np.ndarray, int | None]:
    rules: list[int | None] = [lookahead + e for e in range(EXTRA_LOOKAHEAD + 1)]
    runs = [(_run(inst, order, group, rule), rule) for rule in [*rules, None]]
    # completion = start + o for every request: least Σ start is least latency
    return min(runs, key=lambda run: int(run[0].sum()))


def best_starts(
    inst: Instance, order: np.ndarray, group: np.ndarray, lookahead: int = 0
) -> np.ndarray:
    """Start boundaries of the least-latency run of ``order`` among the ``best`` Phase-2
    candidates: ``batch`` with ``lookahead`` up to ``lookahead + EXTRA_LOOKAHEAD``
    batches of look-ahead, and head-of-line."""
    return _best(inst, order, group, lookahead)[0]


def polish(
    inst: Instance,
    order: np.ndarray,
    group: np.ndarray,
    moves: int,
    rng: np.random.Generator,
    lookahead: int = 0,
    window: int = 6,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``moves`` local moves over the list (see module doc); the polished
    ``(order, group, starts)``, never worse than the list given.

    A move is first run with the rule that won for the current list only (one run
    instead of five); one that passes is run with every candidate rule before it is
    taken, so the rule can change as the list does.
    """
    n = order.size
    starts, rule = _best(inst, order, group, lookahead)
    if n < 2 or moves <= 0:
        return order, group, starts
    cost = int(starts.sum())
    for _ in range(moves):
        i = int(rng.integers(n))
        j = int(np.clip(i + rng.integers(-window, window + 1), 0, n - 1))
        if i == j:
            continue
        new_order, new_group = order.copy(), group
        if rng.random() < 0.5:  # swap: each entry takes the other's place (and batch)
            new_order[i], new_order[j] = order[j], order[i]
        else:  # move entry i to place j, into the batch found there
            new_order = np.insert(np.delete(order, i), j, order[i])
            new_group = np.insert(np.delete(group, i), j, group[j])
            new_group = np.maximum.accumulate(new_group)
        if int(_run(inst, new_order, new_group, rule).sum()) > cost:
            continue
        new_starts, new_rule = _best(inst, new_order, new_group, lookahead)
        order, group, starts, rule = new_order, new_group, new_starts, new_rule
        cost = int(starts.sum())
    return order, group, starts
