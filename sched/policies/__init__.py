"""Scheduling policies and their registry (:mod:`.registry`).

``POLICIES`` and ``ROUTERS`` list every built-in name with its backends and options;
:class:`PolicySpec` is a policy as a run names it (built-in or ``MODULE:CLASS``);
:func:`make_policy` builds one. See docs/policies.md.
"""

from servecal.sched.policies._common import room_for
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
from servecal.util.lazy import lazy_exports

#: The policy classes, imported on first use (PEP 562): the registry names every
#: class by import path, so a run imports only the policy it runs, and importing
#: this package for the registry does not pay for SLOWeave and its controllers.
_CLASSES = {
    "SLOWeave": "sloweave",
    "SLOWeaveConfig": "sloweave",
    "FixedChunk": "static",
    "FullPrefill": "static",
    "TokenBudget": "budget",
}

__getattr__ = lazy_exports(__name__, _CLASSES)


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
