"""Run a set of offline schedulers on one instance and score them with the one simulator."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from servecal.sched.sortedf import algorithms as alg
from servecal.sched.sortedf.batching import SOLVERS
from servecal.sched.sortedf.exact import MAX_N as EXACT_MAX_N
from servecal.sched.sortedf.lp import LPResult, lp_relaxation
from servecal.sched.sortedf.model import Instance, ScheduleScore, score_schedule

ALGOS = ("fcfs", "mc-sf", "sorted-f", "sorted-lp", "sorted-f-amin", "opt")
DEFAULT_ALGOS = ("fcfs", "mc-sf", "sorted-f", "sorted-lp")


@dataclass(frozen=True)
class OfflineConfig:
    """Which schedulers to run and their knobs."""

    algos: tuple[str, ...] = DEFAULT_ALGOS
    solver: str = "auto"
    alpha: float = 0.1
    amin_width: float = 0.5
    lp_bound: bool = True
    phase2: str = "best"
    lookahead: int = 0
    polish_moves: int = 0  # local moves on the Sorted-F list, scored on latency (0: off)

    def __post_init__(self) -> None:
        unknown = [a for a in self.algos if a not in ALGOS]
        if unknown or not self.algos:
            raise ValueError(f"unknown algorithm(s) {unknown}; choose from {', '.join(ALGOS)}")
        if self.solver not in SOLVERS:
            raise ValueError(f"unknown solver {self.solver!r}; choose from {', '.join(SOLVERS)}")
        if self.phase2 not in alg.PHASE2:
            raise ValueError(
                f"unknown Phase-2 rule {self.phase2!r}; choose from {', '.join(alg.PHASE2)}"
            )
        if self.lookahead < 0:
            raise ValueError("lookahead must be >= 0")
        if self.polish_moves < 0:
            raise ValueError("polish moves must be >= 0")
        if not 0.0 <= self.alpha < 1.0:
            raise ValueError("alpha must be in [0, 1)")
        if not 0.0 <= self.amin_width < 1.0:
            raise ValueError("amin width must be in [0, 1)")


@dataclass(frozen=True)
class AlgoOutcome:
    sim: ScheduleScore
    solver_s: float


@dataclass
class Outcome:
    """Per-algorithm results on one instance, and the LP bound if computed."""

    algos: dict[str, AlgoOutcome] = field(default_factory=dict)
    lp: LPResult | None = None
    lp_s: float = 0.0

    def gap(self) -> float | None:
        """Sorted-F's mean latency over the LP bound (else the best algorithm's)."""
        if self.lp is None or self.lp.mean <= 0 or not self.algos:
            return None
        ref = self.algos.get("sorted-f") or min(
            self.algos.values(), key=lambda a: a.sim.mean_latency
        )
        return ref.sim.mean_latency / self.lp.mean


def run_instance(inst: Instance, config: OfflineConfig, rng: np.random.Generator) -> Outcome:
    """Schedule ``inst`` with every configured algorithm; ``rng`` feeds Amin's predictions."""
    if "opt" in config.algos and inst.n > EXACT_MAX_N:
        raise ValueError(f"'opt' (exact search) needs n <= {EXACT_MAX_N}; got n = {inst.n}")
    out = Outcome()
    if config.lp_bound or "sorted-lp" in config.algos:
        t0 = time.perf_counter()
        out.lp = lp_relaxation(inst, horizon=alg.default_horizon(inst))
        out.lp_s = time.perf_counter() - t0
    for name in config.algos:
        t0 = time.perf_counter()
        if name == "fcfs":
            seg = alg.fcfs(inst, config.alpha)
        elif name == "mc-sf":
            seg = alg.mc_sf(inst)
        elif name == "sorted-f":
            seg = alg.sorted_f(
                inst, config.solver, config.phase2, config.lookahead, config.polish_moves
            )
        elif name == "sorted-lp":
            seg = alg.sorted_lp(inst, out.lp)
        elif name == "sorted-f-amin":
            seg = alg.sorted_f_amin(inst, rng, config.amin_width, config.solver)
        else:
            seg = alg.optimum(inst)
        solver_s = time.perf_counter() - t0
        if name == "sorted-lp":
            solver_s += out.lp_s
        out.algos[name] = AlgoOutcome(score_schedule(inst, seg), solver_s)
    if not config.lp_bound:
        out.lp = None
    return out
