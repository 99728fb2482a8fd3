"""One part of ``benchmarks/cluster.py``'s comparison, for counting instructions.

    python benchmarks/cluster_instructions.py PART ROUTER REPLICAS PER_REPLICA ASSIGNMENT

CPU seconds on a shared host move ×1.5 between invocations; instructions executed do
not. Run each part under ``valgrind --tool=cachegrind`` and subtract ``setup``'s count:

    V="valgrind --tool=cachegrind --cache-sim=yes"
    $V python benchmarks/cluster_instructions.py setup   least-requests 64 100 a.json
    $V python benchmarks/cluster_instructions.py cluster least-requests 64 100 a.json
    $V python benchmarks/cluster_instructions.py alone   least-requests 64 100 a.json

``setup`` builds the cluster of ``benchmarks/cluster.py`` (SLOWeave replicas, mixed
requests at 50 req/s per replica) and stops; ``cluster`` also runs it and writes each
replica's request ids to ``ASSIGNMENT`` (JSON); ``cluster-nogc`` runs it with the
garbage collector off (and writes nothing); ``alone`` runs each replica's requests
(read from ``ASSIGNMENT``) on a plain engine with that replica's noise stream, as
``benchmarks/cluster.py`` does (its engines' construction is counted too: a slight
overcount of the engines' side). ``(cluster − setup) / (alone − setup)`` is the
cluster's cost in units of its engines' own. Each part prints the garbage
collections it ran, per generation.
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster import _rng  # noqa: E402

from servecal.sched.cluster import ClusterSpec, ReplicaSpec  # noqa: E402
from servecal.sched.cluster.cluster import Cluster  # noqa: E402
from servecal.sched.cluster.spec import build_cluster, replica_rng  # noqa: E402
from servecal.sched.engine import Engine, EngineConfig  # noqa: E402
from servecal.sched.experiment.models import load_predictor, load_truth  # noqa: E402
from servecal.sched.experiment.run import requests_for  # noqa: E402
from servecal.sched.policies.registry import ENGINE, PolicySpec  # noqa: E402

PARTS = ("setup", "cluster", "cluster-nogc", "alone")


def main() -> None:
    if len(sys.argv) != 6 or sys.argv[1] not in PARTS:
        print(f"error: usage: {sys.argv[0]} {'|'.join(PARTS)} ROUTER N PER OUT.json",
              file=sys.stderr)  # fmt: skip
        raise SystemExit(2)
    part, router, n, per, assignment = sys.argv[1:]
    replicas_n, per_replica = int(n), int(per)
    policy = PolicySpec("sloweave")
    spec = ClusterSpec("mixed", (ReplicaSpec(policy),) * replicas_n, PolicySpec(router),
                       tpot_slo_ms=25, rate=50.0 * replicas_n,
                       n_requests=per_replica * replicas_n)  # fmt: skip
    requests = requests_for(spec, 0)  # type: ignore[arg-type]
    replicas, route = build_cluster(spec, _rng(0))
    truth, predictor = load_truth("device"), load_predictor("fitted", "device")
    before = [g["collections"] for g in gc.get_stats()]
    if part == "cluster-nogc":
        gc.disable()
        Cluster(requests, replicas, route).run()
        gc.enable()
    elif part == "cluster":
        cols = Cluster(requests, replicas, route).run().request_columns
        mine = {i: cols["rid"][cols["replica"] == i].tolist() for i in range(replicas_n)}
        Path(assignment).write_text(json.dumps(mine))
    elif part == "alone":
        by_rid = {r.rid: r for r in requests}
        for i, rids in json.loads(Path(assignment).read_text()).items():
            executor = truth.executor(replica_rng(_rng(0), int(i)), None)
            engine = Engine([by_rid[rid] for rid in rids], policy.build(ENGINE), predictor,
                            executor, EngineConfig())  # fmt: skip
            engine.run()
    after = [g["collections"] for g in gc.get_stats()]
    print("gc collections by generation:", [b - a for a, b in zip(before, after, strict=True)])


if __name__ == "__main__":
    main()
