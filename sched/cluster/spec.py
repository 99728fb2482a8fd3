"""A cluster run as the experiment layer runs it: :class:`ClusterSpec` and its runner.

A :class:`ClusterSpec` names the workload the way a :class:`RunSpec` does (the same
fields, :class:`FleetWorkload`, so :func:`servecal.sched.experiment.run.requests_for`
draws the same requests for a seed) and, instead of one policy on one engine, its
replicas and router. Its ``backend`` is ``cluster``, whose runner (:func:`run_cluster`)
the experiment layer's ``RUNNERS`` table names, so
:func:`~servecal.sched.experiment.sweep` runs cluster specs as it runs engine specs:
run folders, seeds, max-goodput searches, local or Ray pools.

Randomness: replica 0 draws its iteration noise from the run's executor stream (child
1 of ``SeedSequence(seed)``, as a single engine does: a 1-replica cluster *is* that
run), replica ``i > 0`` from its own child ``SeedSequence(seed, spawn_key=(1, i))``.
"""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, asdict, dataclass, field, replace
from typing import Any, Self

import numpy as np

from servecal.costmodels.provenance import NO_TRUST, TableTrust
from servecal.sched.experiment.models import DEFAULT_PREDICTOR, DEFAULT_TRUTH
from servecal.sched.experiment.spec import PREFIX_CACHE_MODES, SETTINGS
from servecal.sched.policies.registry import ENGINE, ROUTER, PolicySpec
from servecal.sched.request import Request
from servecal.sched.result import RunResult

CLUSTER = "cluster"


@dataclass(frozen=True)
class ReplicaSpec:
    """One replica: its ``policy``, the ``truth`` its iterations are drawn from, the
    ``predictor`` (cost table) its policy and the router plan with, its KV capacity in
    tokens, and a ``name`` (the device and TP it stands for, e.g. ``A100x1``);
    ``speculative``: ``k=N,accept=P`` when it decodes speculatively (docs/engine.md)."""

    policy: PolicySpec
    truth: str = DEFAULT_TRUTH
    predictor: str = DEFAULT_PREDICTOR
    kv_capacity: int = 500_000
    name: str = "replica"
    speculative: str | None = None

    def __post_init__(self) -> None:
        if self.kv_capacity < 1:
            raise ValueError("kv_capacity must be >= 1")
        if self.speculative is not None:
            from servecal.sched.speculative import parse_speculative

            parse_speculative(self.speculative)


@dataclass(frozen=True)
class FleetWorkload:
    """The workload of a fleet run: what :class:`ClusterSpec` and
    :class:`~servecal.sched.cluster.disagg.DisaggSpec` share, each field meaning what it
    means on :class:`~servecal.sched.experiment.spec.RunSpec` (so a seed draws the same
    requests for an engine, an aggregated and a disaggregated fleet). All but
    ``workload`` are keyword-only: a spec's own fields keep their places after it."""

    workload: str
    _: KW_ONLY
    tpot_slo_ms: float | None = None
    rate: float | None = None
    n_requests: int = 2000
    seeds: tuple[int, ...] = (0,)
    setting: str = "colocated"
    slo_classes: str | None = None
    prompt_scale: float = 1.0
    ttft_scale: float = 1.0
    #: The command's table flags: whether a table loads, never what a run computes.
    trust: TableTrust = field(default=NO_TRUST, compare=False)

    def check_workload(self) -> None:
        """Refuse a rate a synthetic workload lacks or cannot run at, and no requests."""
        if self.rate is None and not self.workload.startswith("trace:"):
            raise ValueError("rate is required for a synthetic workload")
        if self.rate is not None and not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError("rate must be > 0")
        if self.n_requests < 1 or not self.seeds:
            raise ValueError("need n_requests >= 1 and at least one seed")

    @property
    def slos(self) -> tuple[str, ...]:
        return ("ttft", "tpot")

    def at_rate(self, rate: float) -> Self:
        return replace(self, rate=rate)


@dataclass(frozen=True)
class ClusterSpec(FleetWorkload):
    """Everything a cluster run depends on (see the module docstring).

    ``replicas``; ``router`` (a registry name such as ``round-robin`` or
    ``module:Class``, with options); ``groups``: SLO-class routing, ``(tier, replica
    indices)`` pairs (``()``: every request may go anywhere). The workload fields
    (:class:`FleetWorkload`) mean what they mean on
    :class:`~servecal.sched.experiment.spec.RunSpec`, and so does ``prefix_cache``
    (each replica has its own cache).
    """

    replicas: tuple[ReplicaSpec, ...]
    router: PolicySpec = field(default_factory=lambda: PolicySpec("round-robin"))
    groups: tuple[tuple[str, tuple[int, ...]], ...] = ()
    prefix_cache: str = "auto"

    def __post_init__(self) -> None:
        if self.prefix_cache not in PREFIX_CACHE_MODES:
            raise ValueError(f"prefix_cache must be one of {'|'.join(PREFIX_CACHE_MODES)}")
        if not self.replicas:
            raise ValueError("a cluster needs at least one replica")
        if self.setting != "colocated":
            raise ValueError(f"a cluster runs the colocated setting (of {', '.join(SETTINGS)})")
        self.check_workload()
        for tier, members in self.groups:
            if not members or any(not 0 <= i < len(self.replicas) for i in members):
                raise ValueError(
                    f"tier {tier!r}: replica indices must be in 0..{len(self.replicas) - 1}"
                )

    backend = CLUSTER  # not a field: what the experiment layer's RUNNERS dispatch on

    @property
    def models(self) -> str:
        from servecal.sched.experiment.models import models_label

        pairs = dict.fromkeys(models_label(r.truth, r.predictor) for r in self.replicas)
        return " | ".join(pairs)

    @property
    def label(self) -> str:
        """``2×A100x1[sloweave] + 1×H100x1[fixed-512] · round-robin``."""
        parts: dict[str, int] = {}
        for r in self.replicas:
            key = f"{r.name}[{r.policy.label}]"
            parts[key] = parts.get(key, 0) + 1
        fleet = " + ".join(f"{n}×{k}" for k, n in parts.items())
        tiers = " (tiers " + ", ".join(t for t, _ in self.groups) + ")" if self.groups else ""
        return f"{fleet} · {self.router.label}{tiers}"

    def describe(self) -> dict[str, Any]:
        doc = asdict(self)
        del doc["trust"]
        doc["backend"] = CLUSTER
        doc["router"] = self.router.label
        doc["replicas"] = [_replica_doc(r) for r in self.replicas]
        doc["groups"] = {t: list(m) for t, m in self.groups}
        doc["seeds"] = list(self.seeds)
        return doc


def _replica_doc(r: ReplicaSpec) -> dict[str, Any]:
    """A replica for ``run.json`` (no ``speculative`` key when it is off, as before)."""
    doc = {**asdict(r), "policy": r.policy.label}
    if doc["speculative"] is None:
        del doc["speculative"]
    return doc


def speculative_config(text: str | None, rng: np.random.Generator) -> Any:
    """A replica's speculative decoding, seeded from its stream's seed sequence."""
    if text is None:
        return None
    from servecal.sched.speculative import parse_speculative

    seed = int(rng.bit_generator.seed_seq.generate_state(1)[0])  # type: ignore[attr-defined]
    return parse_speculative(text).seeded(seed)


def replica_rng(rng: np.random.Generator, i: int) -> np.random.Generator:
    """Replica ``i``'s noise stream: the run's executor stream for 0, else its own child."""
    if i == 0:
        return rng
    ss = rng.bit_generator.seed_seq
    return np.random.default_rng(
        np.random.SeedSequence(ss.entropy, spawn_key=(*ss.spawn_key, i))  # type: ignore[attr-defined]
    )


def build_cluster(
    spec: ClusterSpec, rng: np.random.Generator, prefix_cache: Any = None
) -> tuple[list[Any], Any]:
    """``(replicas, router)`` for one run of ``spec`` (each replica with its own prefix
    cache of config ``prefix_cache``, when given)."""
    from servecal.sched.cluster.replica import Replica, replica_engine
    from servecal.sched.experiment.models import load_predictor, load_truth

    replicas = []
    for i, r in enumerate(spec.replicas):
        stream = replica_rng(rng, i)
        engine = replica_engine(
            r.policy.build(ENGINE),
            load_predictor(r.predictor, r.truth, spec.trust),
            load_truth(r.truth).executor(stream, None),
            r.kv_capacity,
            r.policy.label,
            prefix_cache=prefix_cache,
            speculative=speculative_config(r.speculative, stream),
        )
        replicas.append(Replica(i, r.name, engine))
    return replicas, spec.router.build(ROUTER)


def run_cluster(
    spec: ClusterSpec, requests: list[Request], rng: np.random.Generator, on_progress: Any
) -> RunResult:
    """The experiment layer's runner for ``backend = cluster``."""
    from servecal.sched.cluster.cluster import Cluster
    from servecal.sched.experiment.run import prefix_cache_config

    replicas, router = build_cluster(spec, rng, prefix_cache_config(spec, requests))
    return Cluster(requests, replicas, router, dict(spec.groups)).run()
