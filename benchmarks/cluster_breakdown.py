"""Where a load-aware cluster run's CPU goes, by part (docs/fleet.md, issue 47).

    python benchmarks/cluster_breakdown.py [--replicas 16,64] [--per-replica 100]
        [--routers least-requests,predicted-latency]

The cluster of ``benchmarks/cluster.py`` (SLOWeave replicas, mixed requests at 50 req/s
per replica) run by a copy of :meth:`Cluster.run`'s loop with CPU timers
(``time.process_time``) around each part: the replicas' iterations while requests
still arrive (``step``), re-reading their load after each stepping (``sync``), the
router (``route``), running every replica to the end after the last arrival
(``finish``), building each replica's result (``result``), and the rest of the loop
(heap of replica clocks, queueing the request: ``loop``). Also: replica visits (one
heap pop, stepping, ``sync``, one push) and the iterations they ran. The copy's
iterations are checked against a real :class:`Cluster` run's.
"""

from __future__ import annotations

import argparse
import sys
import time
from heapq import heappop, heappush, heapreplace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster import _rng  # noqa: E402

from servecal.sched.cluster import ClusterSpec, ReplicaSpec  # noqa: E402
from servecal.sched.cluster.cluster import Cluster  # noqa: E402
from servecal.sched.cluster.spec import build_cluster  # noqa: E402
from servecal.sched.experiment.run import requests_for  # noqa: E402
from servecal.sched.policies.registry import PolicySpec  # noqa: E402

PARTS = ("step", "sync", "route", "loop", "finish", "result")


def timed_run(cluster: Cluster) -> tuple[dict[str, float], int]:
    """:meth:`Cluster.run`'s loop (no SLO tiers) with a CPU timer per part; the parts'
    seconds and counts, and the iterations run."""
    clock = time.process_time
    acc = dict.fromkeys(PARTS, 0.0) | {"visits": 0, "arrival_steps": 0}
    replicas, route = cluster.replicas, cluster.router.route
    engines = [r.engine for r in replicas]
    behind: list[tuple[float, int]] = []
    queued: set[int] = set()
    start = clock()
    for request in cluster.requests:
        t = request.arrival_ms
        while behind and behind[0][0] < t:
            k = behind[0][1]
            engine = engines[k]
            engine.next_arrival_ms = t
            state, step = engine.state, engine.step
            working, n, a = True, 0, clock()
            while state.now_ms < t:
                n += 1
                if not step():
                    working = False
                    break
            b = clock()
            replicas[k].sync()
            acc["sync"] += clock() - b
            acc["step"] += b - a
            acc["visits"] += 1
            acc["arrival_steps"] += n
            if working:
                heapreplace(behind, (state.now_ms, k))
            else:
                heappop(behind)
                queued.discard(k)
        a = clock()
        chosen = route(request, replicas)
        acc["route"] += clock() - a
        replicas[chosen].add(request)
        if chosen not in queued:
            queued.add(chosen)
            heappush(behind, (replicas[chosen].now_ms, chosen))
    a = clock()
    for r in replicas:
        r.finish()
    b = clock()
    results = [r.engine.result() for r in replicas]
    acc["finish"], acc["result"] = b - a, clock() - b
    total = clock() - start
    acc["loop"] = total - sum(acc[p] for p in PARTS if p != "loop")
    acc["total"] = total
    return acc, sum(len(r.iteration_columns["duration_ms"]) for r in results)


def cluster_for(n: int, router: str, per_replica: int) -> Cluster:
    spec = ClusterSpec("mixed", (ReplicaSpec(PolicySpec("sloweave")),) * n, PolicySpec(router),
                       tpot_slo_ms=25, rate=50.0 * n, n_requests=per_replica * n)  # fmt: skip
    replicas, route = build_cluster(spec, _rng(0))
    return Cluster(requests_for(spec, 0), replicas, route)  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", default="16,64")
    parser.add_argument("--per-replica", type=int, default=100)
    parser.add_argument("--routers", default="least-requests,predicted-latency")
    args = parser.parse_args()
    cluster_for(1, "round-robin", 10).run()  # load the truth and table outside the timings
    print("| replicas | router | total CPU s | " + " | ".join(PARTS) + " | visits | "
          "iterations while arriving / all | sync + route + loop per request µs |")  # fmt: skip
    print("|" + " --- |" * (len(PARTS) + 6))
    for n in (int(x) for x in args.replicas.split(",")):
        for router in args.routers.split(","):
            acc, iterations = timed_run(cluster_for(n, router, args.per_replica))
            real = cluster_for(n, router, args.per_replica).run()
            if len(real.iteration_columns["duration_ms"]) != iterations:
                raise SystemExit("error: the timed copy no longer runs Cluster.run's iterations")
            per_request = (acc["sync"] + acc["route"] + acc["loop"]) / (n * args.per_replica)
            print(f"| {n} | {router} | {acc['total']:.2f} | "
                  + " | ".join(f"{acc[p]:.3f}" for p in PARTS)
                  + f" | {acc['visits']:,} | {acc['arrival_steps']:,} / {iterations:,} | "
                  f"{per_request * 1e6:.1f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
