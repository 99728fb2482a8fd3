"""The markdown table of benchmarks/speculative.sh's runs (docs/results/2026-12-04-speculative.md).

    python benchmarks/speculative_table.py OUT

reads ``OUT-none.json``, ``OUT-k4-a0.6.json`` and ``OUT-k4-a0.8.json`` (``compare
--json`` rows) and prints, per workload and condition: SLOWeave's and the best fixed
chunk's maximum goodput (mean ± std over seeds) and P99 TPOT at the offered rate,
and the tokens a decode step delivered.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

CONDITIONS = (("none", "no speculation"), ("k4-a0.6", "k=4, accept 0.6"),
              ("k4-a0.8", "k=4, accept 0.8"))  # fmt: skip


def _goodput(row: dict) -> str:
    bound = {"above_cap": "> ", "below_floor": "< "}.get(row.get("max_goodput_bound") or "", "")
    return f"{bound}{row['max_goodput']:.1f} ± {row.get('max_goodput_std') or 0:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    args = parser.parse_args()
    print(
        "| workload | decoding | SLOWeave max goodput | best fixed chunk | its max goodput "
        "| SLOWeave P99 TPOT ms | best fixed's P99 TPOT ms | tokens per decode step |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for workload in ("chat", "mixed"):
        for key, label in CONDITIONS:
            path = Path(f"{args.out}-{key}.json")
            if not path.is_file() or not path.stat().st_size:
                continue
            rows = [r for r in json.loads(path.read_text()) if r["workload"] == workload]
            slo = next(r for r in rows if r["policy"] == "sloweave")
            fixed = max((r for r in rows if r["policy"].startswith("fixed-")),
                        key=lambda r: r["max_goodput"])  # fmt: skip
            tokens = slo.get("tokens_per_decode")
            print(
                f"| {workload} | {label} | {_goodput(slo)} | {fixed['policy']} | "
                f"{_goodput(fixed)} | {slo['p99_tpot_ms']:.1f} | {fixed['p99_tpot_ms']:.1f} | "
                f"{'1' if tokens is None else f'{tokens:.2f}'} |"
            )


if __name__ == "__main__":
    main()
