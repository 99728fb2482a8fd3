"""FlowPrefill (SPEC §3): operator-level preemption and event-driven scheduling for
multi-SLO prefill, its baselines and ablations, on an operator-level driver that
composes the reference engine's pieces. See docs/flowprefill.md."""

from servecal.sched.flowprefill.decision import Decision, DriverView, PrefillPolicy
from servecal.sched.flowprefill.driver import DriverConfig, OperatorDriver
from servecal.sched.flowprefill.operators import GRANULARITIES, OperatorModel
from servecal.sched.flowprefill.policies import Fcfs, FlowPrefill, TokenBudgetChunks
from servecal.sched.flowprefill.priority import by_priority, priority, priority_order, slack_ms
from servecal.sched.flowprefill.registry import (
    ABLATIONS,
    BASELINES,
    driver_policy,
    engine_policy,
    is_flow_policy,
)
from servecal.sched.flowprefill.run import (
    FlowConfig,
    max_goodput_of,
    run_requests,
    run_seed,
    simulate_flow,
    summarize_flow,
)
from servecal.sched.flowprefill.state import Job

__all__ = [
    "ABLATIONS",
    "BASELINES",
    "GRANULARITIES",
    "Decision",
    "DriverConfig",
    "DriverView",
    "Fcfs",
    "FlowConfig",
    "FlowPrefill",
    "Job",
    "OperatorDriver",
    "OperatorModel",
    "PrefillPolicy",
    "TokenBudgetChunks",
    "by_priority",
    "driver_policy",
    "engine_policy",
    "is_flow_policy",
    "max_goodput_of",
    "priority",
    "priority_order",
    "run_requests",
    "run_seed",
    "simulate_flow",
    "summarize_flow",
    "slack_ms",
]
