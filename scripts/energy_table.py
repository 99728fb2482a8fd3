"""Per-policy energy of a `servecal compare` folder, mean ± sd over seeds, as Markdown rows.

    python scripts/energy_table.py OUT

Columns: policy, goodput (req/s), J per good request, mJ per output token, mean board
power (W: the run's joules over its first-to-last-iteration span) and, when searched,
max goodput and J per good request at it (the search's probe at the rate it found).
The dated results page docs/results/2026-12-02-energy.md quotes this script's output.
"""

from __future__ import annotations

import sys

import numpy as np

from servecal.reports.aggregate import policy_order
from servecal.reports.energy import energy_at_max
from servecal.reports.loading import discover


def _ms(values: list[float]) -> str:
    a = np.asarray(values, dtype=float)
    sd = a.std(ddof=1) if a.size > 1 else 0.0
    return f"{a.mean():.2f} ± {sd:.2f}"


def main() -> None:
    runs = discover([sys.argv[1]]).runs
    by_policy: dict[str, list] = {}
    for run in runs:
        by_policy.setdefault(run.policy, []).append(run)
    for policy in sorted(by_policy, key=policy_order):
        rs = sorted(by_policy[policy], key=lambda r: r.seed)
        watts = []
        for r in rs:
            it = r.iterations
            span_ms = it.start_ms.iloc[-1] + it.duration_ms.iloc[-1] - it.start_ms.iloc[0]
            watts.append(1000.0 * it.energy_j.sum() / span_ms)
        row = [
            policy,
            _ms([r.summary["goodput"] for r in rs]),
            _ms([r.summary["energy_per_good_request_j"] for r in rs]),
            _ms([1000.0 * r.summary["energy_per_output_token_j"] for r in rs]),
            f"{np.mean(watts):.0f}",
        ]
        if all(r.search for r in rs):
            row += [_ms([r.search["max_goodput"] for r in rs]),
                    _ms([energy_at_max(r.search) for r in rs])]  # fmt: skip
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
