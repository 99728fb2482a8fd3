"""Memory-constrained batch scheduling: Sorted-F, MC-SF, FCFS, Sorted-LP, Amin, exact.

The discrete-time model of docs/spec.md §2 and its step semantics are in docs/sortedf.md;
:func:`score_schedule` scores every schedule. Typical use::

    from servecal.sched.sortedf import Instance, score_schedule, sorted_f
    inst = Instance(s=[900, 3000, 120], o=[40, 12, 300], memory=8192)
    print(score_schedule(inst, sorted_f(inst)).mean_latency)
"""

from servecal.sched.sortedf.algorithms import (
    fcfs,
    mc_sf,
    optimum,
    sorted_f,
    sorted_f_amin,
    sorted_f_order,
    sorted_lp,
)
from servecal.sched.sortedf.lp import LPResult, lp_relaxation
from servecal.sched.sortedf.model import (
    InfeasibleSchedule,
    Instance,
    ScheduleScore,
    Segments,
    score_schedule,
)
from servecal.sched.sortedf.online import SortedFOnline
from servecal.sched.sortedf.runner import ALGOS, OfflineConfig, Outcome, run_instance

__all__ = [
    "ALGOS",
    "InfeasibleSchedule",
    "Instance",
    "LPResult",
    "OfflineConfig",
    "Outcome",
    "Segments",
    "ScheduleScore",
    "SortedFOnline",
    "fcfs",
    "lp_relaxation",
    "mc_sf",
    "optimum",
    "run_instance",
    "score_schedule",
    "sorted_f",
    "sorted_f_amin",
    "sorted_f_order",
    "sorted_lp",
]
