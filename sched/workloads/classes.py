"""SLO classes: a named kind of request with its lengths and its latency targets.

A workload is a mix of classes with shares; a multi-SLO workload (FlowPrefill's
text/image/search/file) is just a workload with several classes that carry their
own TPOT targets, and the same classes can be stamped onto a replayed trace.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from servecal.sched.workloads.lengths import LengthDist


@dataclass(frozen=True)
class TtftRule:
    """TTFT SLO of a request: ``base_ms + per_token_ms · prompt_tokens``.

    A fixed allowance for the user's patience plus a per-prompt-token allowance for
    the prefill (and the queueing behind other prefills) a longer prompt costs;
    ``per_token_ms = 0`` gives a flat SLO.
    """

    base_ms: float
    per_token_ms: float = 0.0

    def __post_init__(self) -> None:
        if not (self.base_ms > 0 and math.isfinite(self.base_ms)):
            raise ValueError(f"base_ms must be a positive number, got {self.base_ms}")
        if not (self.per_token_ms >= 0 and math.isfinite(self.per_token_ms)):
            raise ValueError(f"per_token_ms must be >= 0, got {self.per_token_ms}")

    def slo_ms(self, prompt_tokens: np.ndarray) -> np.ndarray:
        return self.base_ms + self.per_token_ms * np.asarray(prompt_tokens, dtype=float)


@dataclass(frozen=True)
class SloClass:
    """One kind of request. ``tpot_slo_ms=None`` takes the run's TPOT target (``--tpot-slo``)
    times ``tpot_scale`` (a tenant tier stricter or looser than the run's target)."""

    name: str
    share: float
    prompt: LengthDist
    output: LengthDist
    ttft: TtftRule
    tpot_slo_ms: float | None = None
    tpot_scale: float = 1.0

    def __post_init__(self) -> None:
        if not self.name or any(c.isspace() for c in self.name):
            raise ValueError(f"class name must be a non-empty word, got {self.name!r}")
        if not (self.share > 0 and math.isfinite(self.share)):
            raise ValueError(f"class {self.name}: share must be > 0, got {self.share}")
        if self.tpot_slo_ms is not None and not self.tpot_slo_ms > 0:
            raise ValueError(f"class {self.name}: tpot_slo_ms must be > 0")
        if not (self.tpot_scale > 0 and math.isfinite(self.tpot_scale)):
            raise ValueError(f"class {self.name}: tpot_scale must be > 0, got {self.tpot_scale}")


@dataclass(frozen=True)
class TpotTier:
    """A tenant tier: ``share`` of the requests, TPOT SLO = run's target × ``scale``."""

    name: str
    share: float
    scale: float


def tiered(classes: tuple[SloClass, ...], tiers: tuple[TpotTier, ...]) -> tuple[SloClass, ...]:
    """Every class crossed with every tier: ``<class>-<tier>`` with share = product, so the
    tier is drawn independently of the lengths (and the lengths keep their mix)."""
    return tuple(
        SloClass(
            f"{c.name}-{t.name}",
            c.share * t.share,
            c.prompt,
            c.output,
            c.ttft,
            tpot_scale=c.tpot_scale * t.scale,
        )
        for c in classes
        for t in tiers
    )


def class_probabilities(classes: tuple[SloClass, ...]) -> np.ndarray:
    """Shares renormalised to sum to one (published shares often do not)."""
    shares = np.array([c.share for c in classes], dtype=float)
    return shares / shares.sum()


def draw_classes(classes: tuple[SloClass, ...], n: int, rng: np.random.Generator) -> np.ndarray:
    """Index into ``classes`` for each of ``n`` requests, drawn by share."""
    if len(classes) == 1:
        return np.zeros(n, dtype=np.int64)
    return rng.choice(len(classes), size=n, p=class_probabilities(classes))


def stamp_slos(
    classes: tuple[SloClass, ...], which: np.ndarray, prompt: np.ndarray, tpot_slo_ms: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-request TTFT SLO, TPOT SLO and class name for class indices ``which``."""
    ttft = np.empty(which.size, dtype=float)
    tpot = np.empty(which.size, dtype=float)
    names = np.empty(which.size, dtype=object)
    for k, cls in enumerate(classes):
        rows = which == k
        ttft[rows] = cls.ttft.slo_ms(prompt[rows])
        tpot[rows] = tpot_slo_ms * cls.tpot_scale if cls.tpot_slo_ms is None else cls.tpot_slo_ms
        names[rows] = cls.name
    return ttft, tpot, names
