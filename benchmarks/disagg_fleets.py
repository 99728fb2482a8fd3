"""Given fleets of a plan file, aggregated and split, run once each (docs/capacity.md).

    python benchmarks/disagg_fleets.py examples/capacity/azure_h100_disagg.toml \
        --agg 4,5 --split 2:1,3:1,3:2,2:2 [--device H100x1] [--link nvlink]

For the plan's workload and target: each aggregated count ``N`` (``N`` replicas of
``--device``, the plan's first policy and router) and each split ``P:D`` (``P`` prefill
and ``D`` decode replicas of ``--device``, the plan's first prefill policy, its first
router on both pools, ``--link``) is simulated once at the offered rate; printed:
GPUs, $/hour, attainment, P99 TTFT and P99 TPOT. It answers what a ratio the plan's
units cannot express (3P+2D) would need.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from servecal.sched.cluster.disagg import DisaggSpec
from servecal.sched.cluster.disagg_space import PoolPair
from servecal.sched.cluster.kv_transfer import LINKS
from servecal.sched.cluster.planner import Config, ReplicaSearch, cluster_spec
from servecal.sched.cluster.space import load_space
from servecal.sched.cluster.spec import ReplicaSpec
from servecal.sched.experiment import run, summarize


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plan", type=Path)
    ap.add_argument("--agg", default="4,5")
    ap.add_argument("--split", default="2:1,3:1,3:2,2:2")
    ap.add_argument("--device", default="H100x1")
    ap.add_argument("--link", default="nvlink")
    args = ap.parse_args()
    space = load_space(args.plan)
    [hw] = [h for h in space.hardware if h.name == args.device]
    gpus_per = hw.tp
    print(f"{'fleet':<24} {'GPUs':>4} {'$/hour':>7} {'good %':>7} {'P99 TTFT':>9} {'P99 TPOT':>9}")
    for n in (int(x) for x in args.agg.split(",") if x):
        config = Config(0, hw, space.policies[0], space.routers[0], ReplicaSearch(1, 1))
        spec = cluster_spec(space, config, n, space.rate)
        _print(f"{n} x {hw.name} agg", n * gpus_per, n * hw.price_per_hour, spec)
    pair = PoolPair(hw, hw, (1, 1), LINKS[args.link], space.disaggregated[0].shape)
    for text in (x for x in args.split.split(",") if x):
        p, d = (int(v) for v in text.split(":"))
        replica = ReplicaSpec(space.prefill_policies[0], hw.truth, hw.predictor,
                              hw.kv_capacity, hw.name)  # fmt: skip
        router = space.routers[0]
        spec = DisaggSpec(
            space.workload, (replica,) * p, (replica,) * d, router, router, pair.link,
            pair.shape, tpot_slo_ms=space.tpot_slo_ms, rate=space.rate,
            n_requests=space.n_requests, seeds=space.seeds,
        )  # fmt: skip
        _print(f"{p}P+{d}D {hw.name} {args.link}", (p + d) * gpus_per,
               (p + d) * hw.price_per_hour, spec)  # fmt: skip


def _print(label: str, gpus: int, price: float, spec: object) -> None:
    s = summarize(spec, run(spec, 0))  # type: ignore[arg-type]
    print(f"{label:<24} {gpus:>4} {price:>7.2f} {100 * s['attainment']:>7.1f} "
          f"{s['p99_ttft_ms']:>9.1f} {s['p99_tpot_ms']:>9.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
