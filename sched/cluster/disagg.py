"""A disaggregated deployment: a prefill pool, a KV transfer, a decode pool (docs/capacity.md).

:class:`DisaggSpec` is a run the experiment layer runs (``backend = disaggregated``,
the same workload fields as :class:`~servecal.sched.cluster.ClusterSpec`: both are a
:class:`~servecal.sched.cluster.spec.FleetWorkload`, so a seed
draws the same requests for an aggregated and a disaggregated fleet). Its runner:

1. **Prefill pool.** Each request, cut to its prefill (one output token), goes through
   a :class:`~servecal.sched.cluster.Cluster` of prefill replicas behind the prefill
   router: prefill-only iterations under the replicas' policy (``fcfs-chunk-512``,
   ``fixed-512``, any engine policy). A FlowPrefill policy (the operator-level
   driver) runs each replica in the driver's ``prefill`` setting, routed up front (a
   router that reads no replica: ``round-robin``).
2. **Transfer.** Its KV lands on the decode side ``transfer_ms(prompt)`` after its
   prefill ends (:mod:`.kv_transfer`).
3. **Decode pool.** Decode-only replicas behind the decode router
   (:mod:`.decode_pool`); TTFT ends with the decode replica's first iteration.

Randomness: prefill replica ``i`` draws its noise from ``replica_rng(rng, i)`` and decode
replica ``j`` from ``replica_rng(rng, P + j)`` (as a cluster of ``P + D`` replicas
would); the requests are the seed's.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from servecal.sched.cluster.kv_transfer import LINKS, MODELS, KVShape, Link, transfer_ms
from servecal.sched.cluster.spec import FleetWorkload, ReplicaSpec, replica_rng
from servecal.sched.policies.registry import DRIVER, ENGINE, ROUTER, PolicySpec
from servecal.sched.request import Request
from servecal.sched.result import REQUEST_COLUMNS, RunResult, append_request_row, request_columns

DISAGGREGATED = "disaggregated"


@dataclass(frozen=True)
class DisaggSpec(FleetWorkload):
    """A disaggregated run: ``prefill`` and ``decode`` replicas (a decode replica's
    ``policy`` is not used: decode-only iterations have nothing to choose), each pool's
    router, the ``link`` and the model's KV ``shape``, ``layerwise`` overlap; the
    workload fields (:class:`~servecal.sched.cluster.spec.FleetWorkload`) mean what they
    mean on a cluster spec."""

    prefill: tuple[ReplicaSpec, ...]
    decode: tuple[ReplicaSpec, ...]
    prefill_router: PolicySpec = field(default_factory=lambda: PolicySpec("round-robin"))
    decode_router: PolicySpec = field(default_factory=lambda: PolicySpec("round-robin"))
    link: Link = LINKS["ib-ndr"]
    shape: KVShape = MODELS["llama-3-8b"]
    layerwise: bool = False

    backend = DISAGGREGATED  # not a field: what the experiment layer's RUNNERS dispatch on

    def __post_init__(self) -> None:
        if not self.prefill or not self.decode:
            raise ValueError("a disaggregated fleet needs at least one prefill and one decode")
        self.check_workload()

    @property
    def models(self) -> str:
        from servecal.sched.experiment.models import models_label

        pairs = dict.fromkeys(
            models_label(r.truth, r.predictor) for r in self.prefill + self.decode
        )
        return " | ".join(pairs)

    @property
    def label(self) -> str:
        """``P 1×H100x1[fixed-512] · D 2×H100x1 · ib-ndr``."""
        p, d = self.prefill[0], self.decode[0]
        return (f"P {len(self.prefill)}×{p.name}[{p.policy.label}] · D {len(self.decode)}×{d.name}"
                f" · {self.link.name} · {self.prefill_router.label}")  # fmt: skip

    def describe(self) -> dict[str, Any]:
        doc = asdict(self)
        del doc["trust"]
        doc["backend"] = DISAGGREGATED
        doc["prefill_router"] = self.prefill_router.label
        doc["decode_router"] = self.decode_router.label
        for pool in ("prefill", "decode"):
            doc[pool] = [{**asdict(r), "policy": r.policy.label} for r in getattr(self, pool)]
        doc["seeds"] = list(self.seeds)
        return doc


def _prefill_pool(
    spec: DisaggSpec, requests: list[Request], rng: np.random.Generator
) -> tuple[dict[str, np.ndarray], list[RunResult]]:
    """Run the prefill pool on the requests cut to their prefill: its merged request
    columns (``first_token_ms`` is each prefill's end) and each replica's run."""
    from servecal.sched.cluster.cluster import Cluster
    from servecal.sched.cluster.replica import Replica, replica_engine
    from servecal.sched.experiment.models import load_predictor, load_truth

    cut = [replace(r, output_tokens=1) for r in requests]
    router = spec.prefill_router.build(ROUTER)
    policy = spec.prefill[0].policy
    if ENGINE not in policy.resolve().backends:
        return _driver_prefill_pool(spec, cut, rng, router)
    replicas = []
    for i, r in enumerate(spec.prefill):
        engine = replica_engine(
            r.policy.build(ENGINE),
            load_predictor(r.predictor, r.truth, spec.trust),
            load_truth(r.truth).executor(replica_rng(rng, i), None),
            r.kv_capacity,
            r.policy.label,
        )
        replicas.append(Replica(i, r.name, engine))
    merged = Cluster(cut, replicas, router).run()
    return dict(merged.request_columns), [r.engine.result() for r in replicas]


def _driver_prefill_pool(
    spec: DisaggSpec, cut: list[Request], rng: np.random.Generator, router: Any
) -> tuple[dict[str, np.ndarray], list[RunResult]]:
    """FlowPrefill's prefill pool: each replica is the operator-level driver in its
    ``prefill`` setting, the requests routed up front."""
    from servecal.sched.cluster.cluster import merged_result
    from servecal.sched.experiment.models import load_predictor, load_truth
    from servecal.sched.flowprefill.driver import DriverConfig, OperatorDriver

    if getattr(router, "reads_replicas", True):
        raise ValueError(
            f"a {spec.prefill[0].policy.label} prefill pool is routed up front: "
            "use a router that reads no replica (round-robin)"
        )
    stubs = [_Stub(i) for i in range(len(spec.prefill))]
    routed: dict[int, list[Request]] = defaultdict(list)
    for r in sorted(cut, key=lambda r: (r.arrival_ms, r.rid)):
        routed[router.route(r, stubs)].append(r)
    results = []
    for i, r in enumerate(spec.prefill):
        driver = OperatorDriver(
            routed[i],
            r.policy.build(DRIVER),
            load_predictor(r.predictor, r.truth, spec.trust),
            load_truth(r.truth).executor(replica_rng(rng, i), None),
            DriverConfig(setting="prefill", kv_capacity=r.kv_capacity),
            policy_name=r.policy.label,
        )
        results.append(driver.run())
    live = [res for res in results if len(res.request_columns["rid"])]
    return dict(merged_result(live).request_columns), results


class _Stub:
    """What an up-front router sees of a replica: its index."""

    def __init__(self, index: int) -> None:
        self.index = index


def _decode_replicas(spec: DisaggSpec, rng: np.random.Generator) -> list[Any]:
    from servecal.sched.cluster.decode_pool import DecodeReplica
    from servecal.sched.experiment.models import load_predictor, load_truth

    base = len(spec.prefill)
    return [
        DecodeReplica(
            j,
            r.name,
            load_truth(r.truth).executor(replica_rng(rng, base + j), None),
            load_predictor(r.predictor, r.truth, spec.trust),
            r.kv_capacity,
        )
        for j, r in enumerate(spec.decode)
    ]


def run_disaggregated(
    spec: DisaggSpec, requests: list[Request], rng: np.random.Generator, on_progress: Any
) -> RunResult:
    """The experiment layer's runner for ``backend = disaggregated``."""
    from servecal.sched.cluster.decode_pool import run_decode_pool

    prefill, prefill_runs = _prefill_pool(spec, requests, rng)
    done_at = dict(zip(prefill["rid"].tolist(), prefill["first_token_ms"].tolist(), strict=True))
    arrivals = _decode_arrivals(spec, requests, done_at)
    decoders = _decode_replicas(spec, rng)
    chosen = run_decode_pool(arrivals, decoders, spec.decode_router.build(ROUTER))
    decode_of = dict(zip([a[1].rid for a in arrivals], chosen, strict=True))
    rows = _request_rows(requests, prefill, decoders, decode_of)
    rows["kv_transfer_ms"] = np.asarray(
        [transfer_ms(spec.shape, spec.link, p, spec.layerwise) for p in rows["prompt_tokens"]]
    )
    rows["prefill_done_ms"] = np.asarray([done_at.get(int(r), math.nan) for r in rows["rid"]])
    counters = {
        "replicas": len(spec.prefill) + len(spec.decode),
        "prefill_replicas": len(spec.prefill),
        "decode_replicas": len(spec.decode),
        "kv_transfer_ms_mean": float(np.mean(rows["kv_transfer_ms"])) if len(requests) else None,
    }
    return RunResult(
        request_columns=rows,
        iteration_columns=_iterations(len(spec.prefill), prefill_runs, decoders),
        plan_calls=sum(r.plan_calls for r in prefill_runs),
        energy_source="none",
        counters=counters,
    )


def _decode_arrivals(
    spec: DisaggSpec, requests: list[Request], done_at: dict[int, float]
) -> list[tuple[float, Request]]:
    """``(when its KV lands on the decode side, request)`` for every prefilled request,
    in that order."""
    arrivals = []
    for req in requests:
        t = done_at.get(req.rid, math.nan)
        if math.isfinite(t):
            lands = t + transfer_ms(spec.shape, spec.link, req.prompt_tokens, spec.layerwise)
            arrivals.append((lands, req))
    arrivals.sort(key=lambda a: (a[0], a[1].rid))
    return arrivals


def _iterations(
    n_prefill: int, prefill_runs: list[RunResult], decoders: list[Any]
) -> dict[str, np.ndarray]:
    """Every replica's iterations, each with its ``replica`` (prefill ``0..P-1``, decode
    ``P..P+D-1``)."""
    from servecal.sched.cluster.cluster import _concat

    ran = [(i, dict(r.iteration_columns)) for i, r in enumerate(prefill_runs)
           if len(r.iteration_columns["duration_ms"])]  # fmt: skip
    ran += [(n_prefill + d.index, d.iteration_columns()) for d in decoders]
    iterations = _concat([part for _, part in ran])
    counts = [len(part["duration_ms"]) for _, part in ran]
    owners = np.asarray([i for i, _ in ran], dtype=np.int64)
    iterations["replica"] = np.repeat(owners, counts)
    return iterations


def _request_rows(
    requests: list[Request],
    prefill: dict[str, np.ndarray],
    decoders: list[Any],
    decode_of: dict[int, int],
) -> dict[str, np.ndarray]:
    """One row per request, by id: TTFT and TPOT from the decode side, recomputes from
    the prefill side; a request refused by either pool is ``rejected``."""
    recomputes = dict(zip(prefill["rid"].tolist(), prefill["recomputes"].tolist(), strict=True))
    refused = {r.rid for d in decoders for r in d.rejected}
    refused |= set(prefill["rid"][prefill["rejected"]].tolist())
    rows: dict[str, list[Any]] = {name: [] for name in REQUEST_COLUMNS}
    decode_replica = []
    for req in sorted(requests, key=lambda r: r.rid):
        k = decode_of.get(req.rid)
        d = decoders[k] if k is not None else None
        if d is not None and req.rid in d.done:
            first, done, gaps = d.token_times(req.rid)
            tokens = req.output_tokens
        else:
            first, done, gaps, tokens = math.nan, math.nan, np.zeros(0), 0
        append_request_row(rows, req, first_ms=first, done_ms=done, tokens_out=tokens, gaps=gaps,
                           recomputes=int(recomputes.get(req.rid, 0)), parks=0,
                           slo_exception=False, rejected=req.rid in refused)  # fmt: skip
        decode_replica.append(-1 if k is None else k)
    out = request_columns(rows)
    out["decode_replica"] = np.asarray(decode_replica, dtype=np.int64)
    if "replica" in prefill:  # the prefill pool's merged columns are by id too
        out["prefill_replica"] = np.asarray(prefill["replica"], dtype=np.int64)
    return out
