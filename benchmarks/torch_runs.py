"""Summarise torch-executor run folders: the results pages' table, one row per run.

For each ``RUN`` (a ``servecal simulate --backend torch --out RUN`` folder, seed 0):
wall time, iterations, online P99+δ coverage and P50 MAPE (``run.json``), the median
actual/P50 over all iterations and over decode-only iterations of 8+ requests, SLO
attainment, recompute preemptions, and how much slower decode-only iterations run
right after the decode group changed (``n_decode`` differs from the previous
iteration's, or a prefill ran just before) than the other decode-only ones; and the
*hindsight floor*: the P50 MAPE of the run's own per-class medians (iterations
grouped by ``n_decode``, chunk range, context decile and prefix range), a
prediction fitted in hindsight on the very iterations it is scored on. No cost
table can do much better on that run: what is left is the host's own noise.

    python benchmarks/torch_runs.py RUN [RUN ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd


def hindsight_mape(it: pd.DataFrame) -> float:
    """P50 MAPE of per-class medians of the iterations themselves (see module doc)."""
    classes = [
        it["n_decode"],
        pd.cut(it["chunk"], [-1, 0, 64, 256, 1024, float("inf")]),
        pd.qcut(it["ctx"].rank(method="first"), 10, labels=False),
        pd.cut(it["prefix"], [-1, 0, 512, 2048, float("inf")]),
    ]
    median = it.groupby(classes, observed=True)["duration_ms"].transform("median")
    return float(((it["duration_ms"] - median).abs() / it["duration_ms"]).mean())


def row(run: Path) -> str:
    seed = run / "seed-0"
    summary = json.loads((seed / "run.json").read_text())["summary"]
    it = pd.read_parquet(seed / "iterations.parquet")
    ratio = it["duration_ms"] / it["pred_p50_ms"]
    decode = it["chunk"] == 0
    changed = (it["n_decode"] != it["n_decode"].shift(1)) | (it["chunk"].shift(1) > 0)
    big = decode & (it["n_decode"] >= 8)
    change_cost = ratio[decode & changed].median() / ratio[decode & ~changed].median()
    online = summary["online"]
    return (
        f"| {run.name} | {summary['wall_s']:.1f} | {len(it)} | {online['p99_coverage']:.1%} "
        f"| {online['p50_mape']:.1%} | {hindsight_mape(it):.1%} "
        f"| {ratio.median():.2f} | {ratio[big].median():.2f} "
        f"| {summary['attainment']:.1%} | {summary['recomputes']} "
        f"| {(decode & changed).mean():.1%} | {change_cost:.2f} |"
    )


def main() -> None:
    print(
        "| run | wall s | iterations | online P99+δ coverage | online P50 MAPE "
        "| hindsight floor | median actual/P50 | … decodes ≥ 8 | attainment "
        "| recompute preemptions "
        "| group-change iterations | their cost ÷ steady |"
    )
    print("| --- " * 12 + "|")
    for arg in sys.argv[1:]:
        print(row(Path(arg)))


if __name__ == "__main__":
    main()
