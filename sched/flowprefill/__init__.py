"""FlowPrefill (docs/flowprefill.md): operator-level preemption and event-driven
scheduling for multi-SLO prefill, its baselines and ablations, on an operator-level
driver that composes the reference engine's pieces. Its policy names are in the
policy registry (:mod:`servecal.sched.policies.registry`); runs go through the
experiment layer (:mod:`servecal.sched.experiment`)."""

from servecal.sched.flowprefill.decision import Decision, DriverView, PrefillPolicy
from servecal.sched.flowprefill.policies import Fcfs, FlowPrefill, TokenBudgetChunks
from servecal.sched.flowprefill.priority import by_priority, priority, priority_order, slack_ms
from servecal.sched.flowprefill.state import Job
from servecal.util.lazy import lazy_exports

#: The driver and its operator model, imported on first use (PEP 562): the policy
#: registry loads FlowPrefill's policies by import path, and an engine run that
#: resolves them (``budget``'s driver backend) needs neither.
__getattr__ = lazy_exports(
    __name__,
    {
        "DriverConfig": "driver",
        "OperatorDriver": "driver",
        "GRANULARITIES": "operators",
        "OperatorModel": "operators",
    },
)

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
