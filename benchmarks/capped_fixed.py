"""A fixed chunk with its decode batch capped by hand: the reference SLOWeave's decode
hold is measured against on a coarse-grid replay (docs/results/2026-12-05-decode-cliff.md).

``fixed-C`` as the engine runs it, except that a prompt is left one token short rather
than completed into a batch of more than ``--cap`` decodes — what vLLM's
``max_num_seqs`` does, set exactly below the step a coarse grid's replay hides. Its
maximum goodput per seed by the same search as ``compare --max-goodput`` and
``benchmarks/robustness.py`` (bracket 1–200 req/s, 2% tolerance), under one of that
benchmark's truths and the table fitted on other draws of its grid.

    python benchmarks/capped_fixed.py --truth coarse-tile --workload long --tpot-slo 25 \\
        --chunk 2048 --cap 45 --cache OUT/cache
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import robustness  # noqa: E402  (this folder's benchmark: its truths and their cache)

from servecal.sched import experiment as ex  # noqa: E402
from servecal.sched.experiment.goodput import Bracket, search_sequentially  # noqa: E402
from servecal.sched.plan import DECODE_ONLY, Plan  # noqa: E402
from servecal.sched.policies.registry import PolicySpec  # noqa: E402
from servecal.sched.policies.static import FixedChunk  # noqa: E402


def capped(cap: int) -> Any:
    """``FixedChunk.plan``, its chunk cut one token short when it would complete a
    prompt into more than ``cap`` decodes."""
    fixed_plan = FixedChunk.plan

    def plan(self: FixedChunk, view: Any, predictor: Any) -> Plan:
        out = fixed_plan(self, view, predictor)
        if not out.prefill or view.n_decode + 1 <= cap:
            return out
        rid, c = out.prefill[0]
        left = view.get(rid).remaining_prefill
        if c < left:  # the prompt is not completed
            return out
        return Plan(prefill=((rid, left - 1),)) if left > 1 else DECODE_ONLY

    return plan


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--truth", required=True, choices=sorted(robustness.BY_NAME))
    parser.add_argument("--workload", default="long")
    parser.add_argument("--tpot-slo", type=float, default=25.0)
    parser.add_argument("--chunk", type=int, required=True)
    parser.add_argument("--cap", type=int, required=True, help="most decodes (0: no cap)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--cache", type=Path, required=True, help="robustness.py's OUT/cache")
    args = parser.parse_args()
    if args.cap > 0:
        FixedChunk.plan = capped(args.cap)  # type: ignore[method-assign]
    truth, table = robustness.models_of(robustness.BY_NAME[args.truth], args.cache)
    policy = PolicySpec.parse("fixed", {"chunk": str(args.chunk)})
    spec = ex.RunSpec(
        args.workload, policy, args.tpot_slo, 1.0, n_requests=args.requests,
        truth=truth, predictor=table,
    )  # fmt: skip
    rates = []
    for seed in range(args.seeds):

        def attainment(rate: float, seed: int = seed) -> float:
            at = spec.at_rate(rate)
            return float(ex.summarize(at, ex.run(at, seed))["attainment"])

        found = search_sequentially(attainment, Bracket(1.0, 200.0))
        rates.append(found.rate)
        print(f"seed {seed}: {found.rate:.2f} req/s ({found.bound})", flush=True)
    cap = f"cap {args.cap}" if args.cap > 0 else "no cap"
    print(
        f"{args.truth} {args.workload} {args.tpot_slo:g} ms fixed-{args.chunk} {cap}: "
        f"{sum(rates) / len(rates):.2f} req/s (mean of {args.seeds} seeds)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
