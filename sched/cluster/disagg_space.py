"""A plan's disaggregated candidates: ``[disaggregated]`` in a plan file (docs/capacity.md).

    [disaggregated]
    prefill_policies = ["fcfs-chunk-512"]   # the prefill pool's scheduling policy
    ratios = [[1, 1], [1, 2], [1, 3]]       # prefill:decode replicas in one unit
    links = ["ib-ndr", "roce-100g"]         # presets, or {name, gbytes_per_s, latency_ms}
    model = "llama-3-8b"                    # the KV shape (or {layers, kv_heads, head_dim})
    layerwise = false                       # layer-wise overlap of the transfer
    pools = "same"                          # "same" | "all" | [["H100x1", "A100x1"], ...]

A candidate is a :class:`PoolPair` (prefill hardware, decode hardware, ratio, link)
with a prefill policy and a router (the plan's ``routers``, each pool its own
instance). Its "replica count" is a count of **units**, a unit being ``p`` prefill and
``d`` decode replicas, so the cost is linear in the count as an aggregated replica's
is and the planner's bisection and cost bound apply unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servecal.sched.cluster.kv_transfer import KVShape, Link, link, model_shape
from servecal.sched.cluster.space import Hardware
from servecal.sched.policies.registry import ENGINE, PolicySpec
from servecal.util.errors import InputError

AGGREGATED, DISAGGREGATED = "aggregated", "disaggregated"


@dataclass(frozen=True)
class PoolPair:
    """The hardware side of a disaggregated candidate (see the module docstring)."""

    prefill: Hardware
    decode: Hardware
    ratio: tuple[int, int]
    link: Link
    shape: KVShape
    layerwise: bool = False

    mode = DISAGGREGATED

    @property
    def name(self) -> str:
        """``P H100x1 1:2 D H100x1 ib-ndr``."""
        p, d = self.ratio
        return f"P {self.prefill.name} {p}:{d} D {self.decode.name} {self.link.name}"

    @property
    def dtype(self) -> str | None:
        """The pools' weight dtype (``bfloat16+fp8``: prefill's, decode's when they differ)."""
        return _joined(self.prefill.dtype, self.decode.dtype)

    @property
    def kv_dtype(self) -> str | None:
        return _joined(self.prefill.kv_dtype, self.decode.kv_dtype)

    @property
    def price_per_hour(self) -> float:
        """One unit's: ``p`` prefill and ``d`` decode replicas."""
        p, d = self.ratio
        return p * self.prefill.price_per_hour + d * self.decode.price_per_hour

    def fleet(self, units: int) -> tuple[int, int]:
        """``(prefill replicas, decode replicas)`` of ``units`` units."""
        return self.ratio[0] * units, self.ratio[1] * units

    def dominates(self, other: Any) -> bool:
        """Everything the same but a link at least as fast (more bandwidth, no more
        latency), and not the same link: ``other`` then moves every KV no sooner, so a
        count at which this pair misses the target is one ``other`` misses too (the
        planner infers it instead of simulating it)."""
        if not isinstance(other, PoolPair) or other.link == self.link:
            return False
        same = (self.prefill, self.decode, self.ratio, self.shape, self.layerwise) == (
            other.prefill, other.decode, other.ratio, other.shape, other.layerwise)  # fmt: skip
        return (same and self.link.gbytes_per_s >= other.link.gbytes_per_s
                and self.link.latency_ms <= other.link.latency_ms)  # fmt: skip

    def describe(self) -> dict[str, Any]:
        return {"prefill": self.prefill.name, "decode": self.decode.name,
                "ratio": list(self.ratio), "link": self.link.name,
                "gbytes_per_s": self.link.gbytes_per_s, "latency_ms": self.link.latency_ms,
                "kv_bytes_per_token": self.shape.bytes_per_token,
                "layerwise": self.layerwise}  # fmt: skip


def _joined(prefill: str | None, decode: str | None) -> str | None:
    if prefill == decode:
        return prefill
    return f"{prefill or 'unstated'}+{decode or 'unstated'}"


def disagg_spec(space: Any, pair: PoolPair, policy: PolicySpec, router: PolicySpec,
                units: int, rate: float | None) -> Any:  # fmt: skip
    """The :class:`~servecal.sched.cluster.disagg.DisaggSpec` of ``units`` units."""
    from servecal.sched.cluster.disagg import DisaggSpec
    from servecal.sched.cluster.spec import ReplicaSpec

    p, d = pair.fleet(units)
    pre, dec = pair.prefill, pair.decode
    prefill = ReplicaSpec(policy, pre.truth, pre.predictor, pre.kv_capacity, pre.name)
    decode = ReplicaSpec(policy, dec.truth, dec.predictor, dec.kv_capacity, dec.name)
    return DisaggSpec(
        space.workload,
        (prefill,) * p,
        (decode,) * d,
        router,
        router,
        pair.link,
        pair.shape,
        pair.layerwise,
        **space.fleet_workload(rate),
    )


def routable(policy: PolicySpec, router: PolicySpec) -> bool:
    """A driver-only prefill policy (FlowPrefill) is routed up front: round-robin only."""
    if ENGINE in policy.resolve().backends:
        return True
    from servecal.sched.policies.registry import ROUTER

    return not getattr(router.build(ROUTER), "reads_replicas", True)


def load_disaggregated(
    table: Any, hardware: tuple[Hardware, ...], parse_policy: Any
) -> tuple[tuple[PoolPair, ...], tuple[PolicySpec, ...]]:
    """The ``[disaggregated]`` table: its pool pairs and prefill policies."""
    where = "disaggregated"
    if not isinstance(table, dict):
        raise InputError(f"[{where}]: expected a table")
    stray = set(table) - {"prefill_policies", "ratios", "links", "model", "layerwise", "pools"}
    if stray:
        raise InputError(f"[{where}]: unknown key {sorted(stray)[0]!r}")
    names = table.get("prefill_policies", ["fcfs-chunk-512"])
    if not isinstance(names, list) or not names:
        raise InputError(f"{where}.prefill_policies: expected a list of policy names")
    policies = tuple(parse_policy(p, f"{where}.prefill_policies") for p in names)
    ratios = _ratios(table.get("ratios", [[1, 1]]))
    links = table.get("links", ["ib-ndr"])
    if not isinstance(links, list) or not links:
        raise InputError(f"{where}.links: expected a list of links")
    # fastest first: a faster link's misses settle the slower links' (PoolPair.dominates)
    chosen = tuple(sorted((link(v, f"{where}.links") for v in links),
                          key=lambda lk: (-lk.gbytes_per_s, lk.latency_ms)))  # fmt: skip
    shape = model_shape(table.get("model", "llama-3-8b"), f"{where}.model")
    layerwise = table.get("layerwise", False)
    if not isinstance(layerwise, bool):
        raise InputError(f"{where}.layerwise = {layerwise!r}: expected true or false")
    named = isinstance(table.get("model", "llama-3-8b"), str)  # a table gives its own bytes
    pairs = tuple(PoolPair(p, d, r, lk, _moved(shape, p, named), layerwise)
                  for p, d in _pools(table.get("pools", "same"), hardware)
                  for r in ratios for lk in chosen)  # fmt: skip
    return pairs, policies


def _moved(shape: KVShape, prefill: Hardware, named: bool) -> KVShape:
    """The KV a transfer moves: a named model's at the prefill pool's KV dtype (an fp8 KV
    cache moves half the bytes of a bf16 one); a model given as a table, as given."""
    from dataclasses import replace

    from servecal.profiler.kvbudget import KV_DTYPE_BYTES

    if not named or prefill.kv_dtype not in KV_DTYPE_BYTES:
        return shape
    return replace(shape, bytes_per_element=float(KV_DTYPE_BYTES[prefill.kv_dtype]))


def _ratios(value: Any) -> tuple[tuple[int, int], ...]:
    ok = isinstance(value, list) and value and all(
        isinstance(r, list) and len(r) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in r)
        for r in value
    )  # fmt: skip
    if not ok:
        raise InputError(f"disaggregated.ratios = {value!r}: expected [[P, D], ...], each >= 1")
    return tuple((r[0], r[1]) for r in value)


def _pools(value: Any, hardware: tuple[Hardware, ...]) -> list[tuple[Hardware, Hardware]]:
    """``same``: each device×TP for both pools; ``all``: every (prefill, decode) pair;
    a list of ``[prefill, decode]`` names (``H100x1``)."""
    if value == "same":
        return [(h, h) for h in hardware]
    if value == "all":
        return [(p, d) for p in hardware for d in hardware]
    by_name = {h.name: h for h in hardware}
    if not isinstance(value, list) or not value:
        raise InputError(f"disaggregated.pools = {value!r}: expected same, all or [[P, D], ...]")
    out = []
    for pair in value:
        if not (isinstance(pair, list) and len(pair) == 2 and all(n in by_name for n in pair)):
            known = ", ".join(by_name)
            raise InputError(f"disaggregated.pools: {pair!r} is not [prefill, decode] of {known}")
        out.append((by_name[pair[0]], by_name[pair[1]]))
    return out
