"""Policy names, parsed in one place.

``POLICIES`` maps a name to a factory ``(options) -> Policy``; a name ending in
``-C`` takes an integer parameter (``fixed-256``, ``budget-2048``). Adding a
policy is one entry here. ``options`` is the :class:`SLOWeaveConfig` the command
line built (others ignore it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from servecal.costmodels.errors import InputError
from servecal.sched.policies.sloweave import SLOWeave, SLOWeaveConfig
from servecal.sched.policies.static import FixedChunk, FullPrefill, TokenBudget
from servecal.sched.policy import Policy

Factory = Callable[[SLOWeaveConfig], Policy]

#: Chunk sizes ``fixed-C`` accepts.
FIXED_RANGE = (64, 2048)

#: Plain names.
POLICIES: dict[str, Factory] = {
    "full": lambda opts: FullPrefill(),
    "sloweave": lambda opts: SLOWeave(opts),
    "sloweave-p50": lambda opts: SLOWeave(replace(opts, quantile=0.5, use_margin=False)),
    "sorted-f-online": lambda opts: _sorted_f_online(),
}


def _sorted_f_online() -> Policy:
    # imported on use: Sorted-F's solvers pull in scipy, which plain runs don't need
    from servecal.sched.sortedf.online import SortedFOnline

    return SortedFOnline()


#: Names with an integer parameter: ``<prefix>-C``.
PARAMETRIC: dict[str, Callable[[int], Policy]] = {
    "fixed": FixedChunk,
    "budget": TokenBudget,
}


#: Name prefixes of the static baselines: a fixed chunking rule, no deadline-aware
#: planning. "Ratio to the best static policy" (SPEC §1) is taken over these, in
#: ``servecal compare`` and in reports alike.
STATIC_PREFIXES = ("fixed", "budget", "full", "default", "fcfs", "edf-chunk")


def is_static(name: str) -> bool:
    """True for the static baselines (fixed-C, budget-C, full, FCFS/EDF with fixed chunks)."""
    return name.lower().startswith(STATIC_PREFIXES)


def parse_policy(name: str, options: SLOWeaveConfig | None = None) -> Policy:
    """Build the policy called ``name``; unknown names raise :class:`InputError`."""
    opts = options or SLOWeaveConfig()
    if name in POLICIES:
        return POLICIES[name](opts)
    prefix, _, value = name.rpartition("-")
    if prefix in PARAMETRIC and value.isdigit():
        size = int(value)
        if prefix == "fixed" and not FIXED_RANGE[0] <= size <= FIXED_RANGE[1]:
            raise InputError(f"policy {name!r}: fixed-C needs C in {FIXED_RANGE[0]}..2048")
        if size < 1:
            raise InputError(f"policy {name!r}: C must be >= 1")
        return PARAMETRIC[prefix](size)
    known = sorted(POLICIES) + [f"{p}-C" for p in PARAMETRIC]
    raise InputError(f"unknown policy {name!r}; known: {', '.join(known)}")


__all__ = [
    "POLICIES",
    "PARAMETRIC",
    "FixedChunk",
    "FullPrefill",
    "SLOWeave",
    "SLOWeaveConfig",
    "STATIC_PREFIXES",
    "TokenBudget",
    "is_static",
    "parse_policy",
]
