"""Workloads: synthetic request streams (chat, mixed, long, bursty, tenants, twoclass, multislo)
and trace replay.

Every parameter lives in frozen dataclasses in :mod:`.spec` and is explained in
docs/workloads.md. Add a workload by adding one entry to ``WORKLOADS``.
"""

from servecal.sched.workloads.arrivals import MarkovModulatedArrivals, PoissonArrivals
from servecal.sched.workloads.classes import SloClass, TpotTier, TtftRule, tiered
from servecal.sched.workloads.generate import (
    TraceWorkload,
    draw_requests,
    generate,
    parse_workload,
)
from servecal.sched.workloads.lengths import FixedLengths, LogNormalLengths, QuantileLengths
from servecal.sched.workloads.spec import CONTEXT_LIMIT, DEFAULT_TTFT, WORKLOADS, WorkloadSpec
from servecal.sched.workloads.trace import load_trace

__all__ = [
    "CONTEXT_LIMIT",
    "DEFAULT_TTFT",
    "WORKLOADS",
    "FixedLengths",
    "LogNormalLengths",
    "MarkovModulatedArrivals",
    "PoissonArrivals",
    "QuantileLengths",
    "SloClass",
    "TraceWorkload",
    "TpotTier",
    "TtftRule",
    "WorkloadSpec",
    "draw_requests",
    "generate",
    "load_trace",
    "parse_workload",
    "tiered",
]
