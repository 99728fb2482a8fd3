"""The schedulers compared by ``servecal offline``, each returning segments to score.

Every function takes an :class:`~.model.Instance` and returns
:class:`~.model.Segments`; none of them scores itself: :func:`~.model.score_schedule` does.
"""

from __future__ import annotations

import numpy as np

from servecal.sched.sortedf.admission import admit_by_group, admit_in_order
from servecal.sched.sortedf.amin import predict_lower_bounds, run_with_estimates
from servecal.sched.sortedf.batching import as_list, form_batches
from servecal.sched.sortedf.exact import exact_optimum
from servecal.sched.sortedf.fcfs import run_fcfs
from servecal.sched.sortedf.lp import LPResult, lp_order, lp_relaxation
from servecal.sched.sortedf.model import Instance, Segments
from servecal.sched.sortedf.polish import best_starts, polish


def mc_sf_order(inst: Instance) -> np.ndarray:
    """MC-SF's list: ascending output length (ties: arrival order)."""
    return np.argsort(inst.o, kind="stable")


def mc_sf(inst: Instance) -> Segments:
    """MC-SF (Jaillet et al.): shortest output first, future-peak admission."""
    return Segments.from_starts(admit_in_order(inst, mc_sf_order(inst)), inst.o)


def sorted_f_order(inst: Instance, solver: str = "auto") -> np.ndarray:
    """Sorted-F Phase 1: the batches minimising F, concatenated, each by ascending o."""
    batches = form_batches(inst.s, inst.o, inst.memory, solver)
    return as_list(batches)[0]


#: Sorted-F's Phase-2 admission rules (docs/sortedf.md §2): ``batch`` admits any
#: waiting member of the earliest unfinished Phase-1 batch that fits (and of the next
#: ``lookahead`` batches), ``head`` only the list's first waiting request, ``list`` any
#: waiting request at all; ``best`` (default) runs ``batch`` with ``lookahead`` to
#: ``lookahead + 3`` and ``head`` on the same list and keeps the schedule of least
#: total latency (offline the outputs are known, so the model itself can judge; no
#: rule is best on every instance; ``list`` is left out, 21–30 % worse at n = 2000).
PHASE2 = ("best", "batch", "head", "list")


def sorted_f(
    inst: Instance,
    solver: str = "auto",
    phase2: str = "best",
    lookahead: int = 0,
    polish_moves: int = 0,
    seed: int = 0,
) -> Segments:
    """Sorted-F: Phase 1 batches, Phase 2 continuous batching by the ``phase2`` rule.

    ``polish_moves > 0`` then improves the Phase-1 list by that many local moves
    scored on the real latency (:mod:`~servecal.sched.sortedf.polish`, seeded by
    ``seed``; it implies the ``best`` Phase 2).
    """
    if phase2 not in PHASE2:
        raise ValueError(f"unknown Phase-2 rule {phase2!r}; choose from {', '.join(PHASE2)}")
    if polish_moves < 0:
        raise ValueError(f"polish_moves must be >= 0, got {polish_moves}")
    batches = form_batches(inst.s, inst.o, inst.memory, solver)
    if not batches:
        return Segments.from_starts(np.zeros(0, dtype=np.int64), inst.o)
    order, group = as_list(batches)
    if polish_moves > 0:  # polishing scores lists by the ``best`` Phase 2
        rng = np.random.default_rng(seed)
        *_, starts = polish(inst, order, group, polish_moves, rng, lookahead)
        return Segments.from_starts(starts, inst.o)
    if phase2 == "best":
        return Segments.from_starts(best_starts(inst, order, group, lookahead), inst.o)
    if phase2 == "head":
        return Segments.from_starts(admit_in_order(inst, order), inst.o)
    if phase2 == "list":
        group = np.zeros(order.size, dtype=np.int64)
    return Segments.from_starts(admit_by_group(inst, order, group, lookahead), inst.o)


def sorted_lp(inst: Instance, lp: LPResult | None = None) -> Segments:
    """Sorted-LP: continuous batching in the LP relaxation's completion order."""
    if lp is None:
        lp = lp_relaxation(inst, horizon=default_horizon(inst))
    return Segments.from_starts(admit_in_order(inst, lp_order(inst, lp)), inst.o)


def sorted_f_amin(
    inst: Instance, rng: np.random.Generator, width: float = 0.5, solver: str = "auto"
) -> Segments:
    """Sorted-F+Amin on seeded lower-bound predictions (see :mod:`.amin`)."""
    lower = predict_lower_bounds(inst.o, rng, width)
    plan = Instance(inst.s, lower, inst.memory)
    return run_with_estimates(inst, sorted_f_order(plan, solver), lower)


def fcfs(inst: Instance, alpha: float = 0.1) -> Segments:
    """FCFS with watermark ``(1 - alpha)·M`` and evict-and-restart."""
    return run_fcfs(inst, alpha)


def optimum(inst: Instance) -> Segments:
    """An optimal schedule by exact search (n <= 8)."""
    _, starts = exact_optimum(inst)
    return Segments.from_starts(starts, inst.o)


def default_horizon(inst: Instance) -> int:
    """A horizon for the LP's intervals: the makespan of MC-SF (any value is valid)."""
    starts = admit_in_order(inst, mc_sf_order(inst))
    return int((starts + inst.o).max()) if inst.n else 1
