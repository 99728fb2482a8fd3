"""FlowPrefill (docs/flowprefill.md): operator-level preemption and event-driven
scheduling for multi-SLO prefill, its baselines and ablations, on an operator-level
driver that composes the reference engine's pieces. Its policy names are in the
policy registry (:mod:`servecal.sched.policies.registry`); runs go through the
experiment layer (:mod:`servecal.sched.experiment`)."""

from servecal.sched.flowprefill.decision import Decision, DriverView, PrefillPolicy
from servecal.sched.flowprefill.driver import DriverConfig, OperatorDriver
from servecal.sched.flowprefill.operators import GRANULARITIES, OperatorModel
from servecal.sched.flowprefill.policies import Fcfs, FlowPrefill, TokenBudgetChunks
from servecal.sched.flowprefill.priority import by_priority, priority, priority_order, slack_ms
from servecal.sched.flowprefill.state import Job

__all__ = [
    "GRANULARITIES",
    "Decision",
    "DriverConfig",
    "DriverView",
    "Fcfs",
    "FlowPrefill",
    "Job",
    "OperatorDriver",
    "OperatorModel",
    "PrefillPolicy",
    "TokenBudgetChunks",
    "by_priority",
    "priority",
    "priority_order",
    "slack_ms",
]
