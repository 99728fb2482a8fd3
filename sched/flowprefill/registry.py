"""Policy names of the FlowPrefill study, per setting.

Prefill setting: every policy runs on the operator-level driver. Colocated:
FlowPrefill and its ablations run on the driver (decodes interleaved at operator
boundaries); the baselines run on the reference engine with decodes fused into
each iteration (``fcfs`` = the engine's ``full``, ``fcfs-chunk-C`` = ``budget-C``,
``edf-chunk-C`` = :class:`EdfTokenBudget`, ``sloweave`` = SLOWeave).
"""

from __future__ import annotations

from collections.abc import Callable

from servecal.costmodels.errors import InputError
from servecal.sched.flowprefill.decision import PrefillPolicy
from servecal.sched.flowprefill.policies import Fcfs, FlowPrefill, TokenBudgetChunks
from servecal.sched.policy import Policy

#: Operator-level driver policies.
DRIVER_POLICIES: dict[str, Callable[[], PrefillPolicy]] = {
    "flowprefill": FlowPrefill,
    # ablation: EDF-like ordering (sign(slack)/d) without operator preemption
    "flowprefill-nopreempt": lambda: FlowPrefill(preemptive=False),
    # ablation: operator preemption without deadlines (shortest remaining prefill first)
    "flowprefill-srpt": lambda: FlowPrefill(order="srpt"),
    "flowprefill-nobatch": lambda: FlowPrefill(batching=False),
    "fcfs": Fcfs,
}

#: ``<prefix>-C`` names with a chunk (token budget) size.
CHUNKED = {"fcfs-chunk": "fcfs", "edf-chunk": "edf"}

#: The baselines of the issue, in report order.
BASELINES = ("fcfs", "fcfs-chunk-512", "fcfs-chunk-2048", "edf-chunk-512")
ABLATIONS = ("flowprefill-nopreempt", "flowprefill-srpt", "flowprefill-nobatch")


def _chunk_size(name: str) -> tuple[str, int] | None:
    prefix, _, value = name.rpartition("-")
    if prefix in CHUNKED and value.isdigit() and int(value) >= 1:
        return CHUNKED[prefix], int(value)
    return None


def known_names() -> list[str]:
    return [*DRIVER_POLICIES, "fcfs-chunk-C", "edf-chunk-C", "sloweave (colocated)"]


def is_flow_policy(name: str) -> bool:
    """Whether ``name`` belongs to this study (the engine's ``sloweave`` does not)."""
    return name in DRIVER_POLICIES or _chunk_size(name) is not None


def driver_policy(name: str) -> PrefillPolicy:
    """The operator-level policy called ``name``; unknown → :class:`InputError`."""
    if name in DRIVER_POLICIES:
        return DRIVER_POLICIES[name]()
    chunked = _chunk_size(name)
    if chunked is not None:
        return TokenBudgetChunks(chunked[1], order=chunked[0])
    raise InputError(f"unknown policy {name!r}; known: {', '.join(known_names())}")


def engine_policy(name: str) -> Policy | None:
    """Colocated baselines on the reference engine; ``None`` for driver policies."""
    from servecal.sched.flowprefill.engine_policies import EdfTokenBudget
    from servecal.sched.policies import parse_policy

    if name == "fcfs":
        return parse_policy("full")
    if name == "sloweave":
        return parse_policy("sloweave")
    chunked = _chunk_size(name)
    if chunked is None:
        return None
    order, size = chunked
    return parse_policy(f"budget-{size}") if order == "fcfs" else EdfTokenBudget(size)


def uses_engine(name: str, setting: str) -> bool:
    """Whether ``name`` runs on the reference engine in ``setting``."""
    if name == "sloweave":
        if setting != "colocated":
            raise InputError("policy 'sloweave' needs --setting colocated (it paces decodes)")
        return True
    if setting == "colocated" and (name == "fcfs" or _chunk_size(name) is not None):
        return True
    driver_policy(name)  # unknown names fail here
    return False
