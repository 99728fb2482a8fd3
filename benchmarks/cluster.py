"""What a cluster run costs against its replicas' own engine runs (docs/capacity.md).

    python benchmarks/cluster.py [--replicas 1,4,16] [--per-replica 1000] [--repeats 3]

For each replica count ``N`` and router: a cluster of ``N`` SLOWeave replicas (the
default ``device`` truth, ``fitted`` table) serves ``N × --per-replica`` mixed requests
at ``50 × N`` req/s (about 90% of one replica's capacity each); then each replica's
requests (as the router assigned them) are run again on a plain engine, alone, with that
replica's noise stream. Printed: CPU seconds of the cluster run and of the sum of the
standalone runs (the best of ``--repeats``, CPU time of this process: stable on a busy
machine), their ratio, the iterations of each (equal when the replica ran exactly the
engine's iterations), the simulated iterations per CPU second, and the router's median
decision time. The cluster's own overhead is the ratio minus one.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from servecal.sched.cluster import ClusterSpec, ReplicaSpec
from servecal.sched.cluster.cluster import Cluster
from servecal.sched.cluster.spec import build_cluster, replica_rng
from servecal.sched.engine import Engine, EngineConfig
from servecal.sched.experiment.models import load_predictor, load_truth
from servecal.sched.experiment.run import requests_for
from servecal.sched.policies.registry import ENGINE, PolicySpec

ROUTERS = ("round-robin", "least-requests", "predicted-latency")


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[1])


def one(n: int, router: str, per_replica: int) -> dict[str, float]:
    policy = PolicySpec("sloweave")
    spec = ClusterSpec("mixed", (ReplicaSpec(policy),) * n, PolicySpec(router), tpot_slo_ms=25,
                       rate=50.0 * n, n_requests=per_replica * n)  # fmt: skip
    requests = requests_for(spec, 0)  # type: ignore[arg-type]
    replicas, route = build_cluster(spec, _rng(0))
    t0 = time.process_time()
    result = Cluster(requests, replicas, route).run()
    cluster_s = time.process_time() - t0
    assigned = result.request_columns["replica"]
    by_rid = {r.rid: r for r in requests}
    rids = result.request_columns["rid"]
    alone_s, alone_iters = 0.0, 0
    truth, predictor = load_truth("device"), load_predictor("fitted", "device")
    for i in range(n):
        mine = [by_rid[int(rid)] for rid in rids[assigned == i]]
        engine = Engine(mine, policy.build(ENGINE), predictor,
                        truth.executor(replica_rng(_rng(0), i), None), EngineConfig())  # fmt: skip
        t0 = time.process_time()
        alone = engine.run()
        alone_s += time.process_time() - t0
        alone_iters += len(alone.iteration_columns["duration_ms"])
    return {
        "cluster_s": cluster_s,
        "alone_s": alone_s,
        "iterations": float(len(result.iteration_columns["duration_ms"])),
        "alone_iterations": float(alone_iters),
        "route_us": result.counters["route_us_median"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", default="1,4,16")
    parser.add_argument("--per-replica", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    one(1, "round-robin", 100)  # load the truth and table once, outside the timings
    print(
        "| replicas | router | cluster CPU s | engines alone CPU s | ratio | iterations "
        "(cluster / alone) | iterations per CPU s | route µs (median) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in (int(x) for x in args.replicas.split(",")):
        for router in ROUTERS:
            runs = [one(n, router, args.per_replica) for _ in range(args.repeats)]
            c = min(r["cluster_s"] for r in runs)
            a = min(r["alone_s"] for r in runs)
            r0 = runs[0]
            print(f"| {n} | {router} | {c:.2f} | {a:.2f} | {c / a:.3f} | "
                  f"{r0['iterations']:.0f} / {r0['alone_iterations']:.0f} | "
                  f"{r0['iterations'] / c:,.0f} | {r0['route_us']:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
