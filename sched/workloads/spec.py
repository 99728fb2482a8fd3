"""The frozen workload catalogue: every number of chat, mixed, long and bursty.

docs/workloads.md gives each number's source and reason. These definitions are
fixed once results are published: change a workload by adding a new name, never
by editing one in place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servecal.sched.workloads.arrivals import (
    ArrivalProcess,
    MarkovModulatedArrivals,
    PoissonArrivals,
)
from servecal.sched.workloads.classes import SloClass, TpotTier, TtftRule, tiered
from servecal.sched.workloads.lengths import LogNormalLengths, QuantileLengths
from servecal.util.errors import InputError

#: Prompt + output of every request is clipped to this many tokens (Llama-3-8B's window).
CONTEXT_LIMIT = 8192
#: multislo's search/file prompts average 4-5k tokens: a 16k window keeps clipping rare.
LONG_CONTEXT_LIMIT = 16384


@dataclass(frozen=True)
class WorkloadSpec:
    """A named workload: its SLO classes (with shares), arrival process and context limit."""

    name: str
    description: str
    classes: tuple[SloClass, ...]
    arrivals: ArrivalProcess
    context_limit: int = CONTEXT_LIMIT

    def __post_init__(self) -> None:
        if not self.classes:
            raise ValueError(f"workload {self.name}: needs at least one class")
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise ValueError(f"workload {self.name}: class names repeat: {names}")
        if self.context_limit < 2:
            raise ValueError(f"workload {self.name}: context_limit must be >= 2")


# Interactive patience plus prefill/queueing allowance per prompt token (docs/workloads.md).
DEFAULT_TTFT = TtftRule(base_ms=500.0, per_token_ms=0.5)

# Chat: median prompt 256 (docs/spec.md §1) with the log-spread of the Azure 2023 conversation
# trace's prompts (robust IQR estimate 0.815); outputs fitted to the same trace
# (median 129, log-sd 0.86), capped at its max_tokens of 1000.
CHAT = SloClass(
    name="chat",
    share=1.0,
    prompt=LogNormalLengths(median=256.0, sigma=0.8, lo=1, hi=CONTEXT_LIMIT),
    output=LogNormalLengths(median=129.0, sigma=0.86, lo=1, hi=1000),
    ttft=DEFAULT_TTFT,
)

# Long-document summarisation: quantiles of Vidur's arXiv summarisation lengths, rows
# with prompts >= 1024 tokens (92% of them; prompt/output log-correlation -0.04 there,
# so the marginals are drawn independently).
_LONG_PROBS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
LONG = SloClass(
    name="long",
    share=1.0,
    prompt=QuantileLengths(
        probs=_LONG_PROBS,
        values=(1024, 1398, 1654, 2023, 2316, 2583, 2829, 3076, 3306, 3518, 3719, 3821, 3937, 4054),
    ),
    output=QuantileLengths(
        probs=_LONG_PROBS,
        values=(5, 60, 78, 103, 123, 142, 163, 186, 213, 252, 321, 399, 802, 3028),
    ),
    ttft=DEFAULT_TTFT,
)

_MIX = (
    SloClass("chat", 0.8, CHAT.prompt, CHAT.output, CHAT.ttft),
    SloClass("long", 0.2, LONG.prompt, LONG.output, LONG.ttft),
)


def _lognormal_with_mean(mean: float, sigma: float) -> LogNormalLengths:
    """A log-normal whose mean (not median) is ``mean``: median = mean · exp(−σ²/2)."""
    return LogNormalLengths(median=mean * math.exp(-(sigma**2) / 2), sigma=sigma, lo=1)


# FlowPrefill's production classes (docs/spec.md §3): TTFT/TBT SLOs, shares of a 2-minute sample
# (69/7/20/3 %, renormalised) and mean inputs. Spreads are ours: conversation-like
# text/image prompts take chat's log-sd 0.8; search/file prompts are assembled documents
# with a narrower spread (0.5, arXiv's is 0.39). Outputs: chat's (FlowPrefill gives none).
MULTISLO_CLASSES = (
    SloClass("text", 69.0, _lognormal_with_mean(646.0, 0.8), CHAT.output, TtftRule(250.0), 100.0),
    SloClass("image", 7.0, _lognormal_with_mean(393.0, 0.8), CHAT.output, TtftRule(500.0), 100.0),
    SloClass(
        "search", 20.0, _lognormal_with_mean(5055.0, 0.5), CHAT.output, TtftRule(4000.0), 200.0
    ),
    SloClass("file", 3.0, _lognormal_with_mean(4132.0, 0.5), CHAT.output, TtftRule(6000.0), 200.0),
)

# Tenants: one engine serving three TPOT tiers at once: interactive 10 ms,
# standard 25 ms, batch 50 ms at --tpot-slo 25, i.e. 0.4x / 1x / 2x the run's target,
# 30 / 40 / 30% of requests, drawn independently of the mixed lengths.
TENANT_TIERS = (
    TpotTier("strict", 0.3, 0.4),
    TpotTier("standard", 0.4, 1.0),
    TpotTier("relaxed", 0.3, 2.0),
)

# Two classes: a minority of interactive requests at a tight TPOT, the rest lenient:
# 10 ms for 20%, 50 ms for 80% at --tpot-slo 25 (0.4x / 2x, tenants' outer tiers), drawn
# independently of the mixed lengths: where a chunk sized per batch should beat one
# static chunk sized for the tight class (docs/results/2026-12-04-slo-classes.md).
TWO_CLASS_TIERS = (
    TpotTier("tight", 0.2, 0.4),
    TpotTier("lenient", 0.8, 2.0),
)

WORKLOADS: dict[str, WorkloadSpec] = {
    "chat": WorkloadSpec(
        "chat",
        "short conversations (Azure-conv shapes, median prompt 256)",
        (CHAT,),
        PoissonArrivals(),
    ),
    "long": WorkloadSpec(
        "long",
        "long-document summarisation (arXiv, prompts 1-4k tokens)",
        (LONG,),
        PoissonArrivals(),
    ),
    "mixed": WorkloadSpec("mixed", "80% chat / 20% long, Poisson", _MIX, PoissonArrivals()),
    "bursty": WorkloadSpec(
        "bursty",
        "the mixed lengths under a two-state MMPP: 3x rate for ~2 s, 1/3x for ~6 s",
        _MIX,
        MarkovModulatedArrivals(burst_factor=3.0, mean_burst_s=2.0, mean_calm_s=6.0),
    ),
    "tenants": WorkloadSpec(
        "tenants",
        "the mixed lengths; TPOT SLO 0.4x / 1x / 2x the run's target for 30 / 40 / 30%",
        tiered(_MIX, TENANT_TIERS),
        PoissonArrivals(),
    ),
    "twoclass": WorkloadSpec(
        "twoclass",
        "the mixed lengths; TPOT SLO 0.4x the run's target for 20%, 2x for 80%",
        tiered(_MIX, TWO_CLASS_TIERS),
        PoissonArrivals(),
    ),
    "multislo": WorkloadSpec(
        "multislo",
        "FlowPrefill's text/image/search/file classes with their own TTFT and TPOT SLOs",
        MULTISLO_CLASSES,
        PoissonArrivals(),
        context_limit=LONG_CONTEXT_LIMIT,
    ),
}


def slo_classes_named(name: str) -> tuple[SloClass, ...]:
    """The classes of workload ``name``, for stamping onto a trace (``--slo-classes``)."""
    if name not in WORKLOADS:
        raise InputError(f"unknown SLO class set {name!r}: expected {'|'.join(WORKLOADS)}")
    return WORKLOADS[name].classes
