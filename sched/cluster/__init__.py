"""Replicas behind a router: a simulated serving fleet (docs/capacity.md).

* :mod:`.replica`: :class:`Replica`, one engine of the cluster that takes its requests
  as the router sends them, with the load figures routers read.
* :mod:`.routers`: the built-in routers (``round-robin``, ``least-requests``,
  ``least-tokens``, ``predicted-latency``), named in the policy registry like
  scheduling policies; ``module:Class`` loads a user's router.
* :mod:`.cluster`: :class:`Cluster`, the loop that interleaves the replicas in time
  and routes each arrival once, and the merged run (:func:`merged_result`).
* :mod:`.spec`: :class:`ClusterSpec`, a cluster run as the experiment layer runs it
  (sweeps, max-goodput searches, local or Ray pools).
"""

from servecal.sched.cluster.cluster import Cluster, merged_result
from servecal.sched.cluster.replica import Replica
from servecal.sched.cluster.spec import ClusterSpec, ReplicaSpec

__all__ = ["Cluster", "ClusterSpec", "Replica", "ReplicaSpec", "merged_result"]
