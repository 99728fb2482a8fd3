"""Cluster runs stay identical as the cluster loop gets faster (issue 47, item 3).

Each case is a small cluster under one router; its per-request and per-iteration
results are compared with a committed expectation written by the cluster as it was
before the loop was optimised (``Replica.sync`` re-reading ``engine.log.rows`` at every
replica visit, ``predicted-latency`` predicting one replica at a time). Regenerate it
only for a change that is meant to alter results:

    python tests/sched/cluster/test_cluster_identical.py --write
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from servecal.sched.cluster import ClusterSpec, ReplicaSpec
from servecal.sched.experiment import run
from servecal.sched.policies.registry import PolicySpec

EXPECTED = Path(__file__).parent / "cluster_identical_expected.json"

#: name -> (workload, replicas, router, rate, requests, tiers)
CASES: dict[str, tuple[str, int, str, float, int, tuple]] = {
    "round-robin": ("mixed", 4, "round-robin", 220.0, 300, ()),
    "least-requests": ("mixed", 4, "least-requests", 220.0, 300, ()),
    "least-tokens": ("mixed", 4, "least-tokens", 220.0, 300, ()),
    "predicted-latency": ("mixed", 4, "predicted-latency", 220.0, 300, ()),
    "predicted-latency-16": ("mixed", 16, "predicted-latency", 900.0, 400, ()),
    "least-requests-16": ("mixed", 16, "least-requests", 900.0, 400, ()),
    # overloaded: most arrivals try several replicas before one is predicted to meet both
    "predicted-latency-overload": ("mixed", 8, "predicted-latency", 1600.0, 800, ()),
    "predicted-latency-tiers": (
        "tenants",
        8,
        "predicted-latency",
        800.0,
        600,
        (("strict", (0, 1, 2)), ("relaxed", (3, 4, 5, 6, 7))),
    ),
    "prefix-affinity": ("chat+prefix", 4, "prefix-affinity", 60.0, 200, ()),
    "least-tokens-prefix": ("chat+prefix", 4, "least-tokens", 60.0, 200, ()),
    "tiers": ("tenants", 3, "least-requests", 60.0, 300, (("strict", (0,)), ("relaxed", (1, 2)))),
}


#: The replicas' policy, pinned: the expectation guards the cluster's loop and routing,
#: not SLOWeave's default controller (``region`` since it was written).
REPLICA_POLICY = PolicySpec.parse("sloweave", {"margin_control": "slo"})


def _spec(name: str) -> ClusterSpec:
    workload, n, router, rate, count, tiers = CASES[name]
    slo = 50.0 if "prefix" in workload else 25.0
    return ClusterSpec(workload, (ReplicaSpec(REPLICA_POLICY),) * n,
                       PolicySpec.parse(router), groups=tiers, tpot_slo_ms=slo, rate=rate,
                       n_requests=count)  # fmt: skip


def _digest(columns: dict[str, np.ndarray], skip: tuple[str, ...] = ()) -> str:
    h = hashlib.sha256()
    for name in sorted(columns):
        if name in skip:
            continue
        column = np.asarray(columns[name])
        h.update(name.encode())
        h.update(repr(column.tolist()).encode() if column.dtype == object else column.tobytes())
    return h.hexdigest()


def observed(name: str) -> dict[str, object]:
    """What the expectation pins for case ``name``."""
    result = run(_spec(name), 0)
    requests, iterations = result.request_columns, result.iteration_columns
    return {
        "replica": requests["replica"].tolist(),
        "requests": _digest(requests),
        # decision_us is the policy's wall-clock time per decision: never reproducible
        "iterations": _digest(iterations, skip=("decision_us",)),
        "n_iterations": len(iterations["duration_ms"]),
        "plan_calls": result.plan_calls,
    }


@pytest.mark.parametrize("name", sorted(CASES))
def test_cluster_runs_are_what_they_were(name):
    expected = json.loads(EXPECTED.read_text())[name]
    got = observed(name)
    assert got["replica"] == expected["replica"]  # the routing decisions, readable
    assert got == expected


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    EXPECTED.write_text(json.dumps({name: observed(name) for name in sorted(CASES)}) + "\n")
