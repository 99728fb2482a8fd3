"""Scheduling policies and their registry (:mod:`.registry`).

``POLICIES`` and ``ROUTERS`` list every built-in name with its backends and options;
:class:`PolicySpec` is a policy as a run names it (built-in or ``MODULE:CLASS``);
:func:`make_policy` builds one. See docs/policies.md.
"""

from servecal.sched.policies._common import room_for
from servecal.sched.policies.budget import TokenBudget
from servecal.sched.policies.registry import (
    DRIVER,
    ENGINE,
    POLICIES,
    ROUTERS,
    PolicyEntry,
    PolicySpec,
    is_baseline,
    listing,
    make_policy,
    resolve,
)
from servecal.sched.policies.sloweave import SLOWeave, SLOWeaveConfig
from servecal.sched.policies.static import FixedChunk, FullPrefill

__all__ = [
    "DRIVER",
    "ENGINE",
    "POLICIES",
    "ROUTERS",
    "FixedChunk",
    "FullPrefill",
    "PolicyEntry",
    "PolicySpec",
    "SLOWeave",
    "SLOWeaveConfig",
    "TokenBudget",
    "is_baseline",
    "listing",
    "make_policy",
    "resolve",
    "room_for",
]
