"""The policy × workload × TPOT-target grid of SPEC §1 (``servecal compare``).

Every cell is run for every seed in a process pool; each run is written as a run
folder ``OUT/<workload>/<policy>/tpot-<D>/seed-<k>/``, and the means over seeds
become one row per cell.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path
from typing import Any

from servecal.sched.policies import is_static
from servecal.sched.simulate import SimulationConfig, run_seed, summarize_run

#: Offered load per workload (req/s) when no rate is given: the paper's operating point,
#: where the analytic model saturates at a 25 ms TPOT target (SLOWeave's attainment near
#: the paper's 79% mixed / 66% long / 89% bursty); chat shares mixed's rate.
#: docs/engine.md gives the sweep these come from.
DEFAULT_RATES: dict[str, float] = {"chat": 60.0, "mixed": 60.0, "long": 35.0, "bursty": 30.0}

#: Row keys of ``compare --json``.
ROW_KEYS = ("workload", "policy", "tpot_slo", "goodput", "attainment", "p99_ttft_ms", "p99_tpot_ms")


def default_rate(workload: str) -> float | None:
    """The documented default rate of a workload; ``None`` (the file's own arrival times)
    for a trace; 10 req/s for a workload without a default."""
    if workload.startswith("trace:"):
        return None
    return DEFAULT_RATES.get(workload, 10.0)


def _cell(config: SimulationConfig, seed: int, folder: str | None) -> dict[str, Any]:
    result = run_seed(config, seed)
    summary = summarize_run(result)
    if folder is not None:
        from servecal.sched.runfolder import write_run

        write_run(folder, result, {**config.describe(), "seed": seed}, summary, {"seed": seed})
    return summary


def run_grid(
    base: SimulationConfig,
    workloads: Sequence[str],
    policies: Sequence[str],
    tpot_slos: Sequence[float],
    rates: dict[str, float | None],
    out: str | Path | None = None,
    jobs: int | None = None,
    on_done: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """Run the grid; return one row per (workload, policy, target): means over seeds."""
    from servecal.sched.metrics import mean_over_seeds

    cells = [
        (w, p, d, replace(base, workload=w, policy=p, tpot_slo_ms=d, rate=rates[w]))
        for d in tpot_slos
        for w in workloads
        for p in policies
    ]
    results: dict[tuple[str, str, float], list[dict[str, Any]]] = {c[:3]: [] for c in cells}
    workers = max(1, min(jobs or os.cpu_count() or 1, len(cells) * len(base.seeds)))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {}
        for w, p, d, config in cells:
            for seed in base.seeds:
                folder = None
                if out is not None:
                    folder = str(Path(out) / w / p / f"tpot-{d:g}" / f"seed-{seed}")
                futures[pool.submit(_cell, config, seed, folder)] = (w, p, d)
        try:
            for future in as_completed(futures):
                results[futures[future]].append(future.result())
                if on_done is not None:
                    on_done()
        except BaseException:  # a bad input or Ctrl-C: do not run the rest of the grid
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    rows = []
    for (w, p, d), summaries in results.items():
        mean = mean_over_seeds(summaries)
        row = {"workload": w, "policy": p, "tpot_slo": d, "rate": rates[w]}
        for key in ROW_KEYS[3:]:
            row[key] = mean.get(key)
            row[f"{key}_std"] = mean.get(f"{key}_std")
        row["recomputes"] = mean.get("recomputes")
        rows.append(row)
    return rows


def ratios(rows: Sequence[dict[str, Any]], policy: str = "sloweave") -> list[dict[str, Any]]:
    """Per (target, workload): ``policy``'s goodput over the best static policy's."""
    out = []
    keys = sorted({(r["tpot_slo"], r["workload"]) for r in rows}, key=lambda k: (k[0], k[1]))
    for d, w in keys:
        cell = [r for r in rows if r["tpot_slo"] == d and r["workload"] == w]
        mine = next((r for r in cell if r["policy"] == policy), None)
        statics = [r for r in cell if is_static(r["policy"])]
        if mine is None or not statics:
            continue
        best = max(statics, key=lambda r: r["goodput"] or 0.0)
        base = best["goodput"] or 0.0
        out.append(
            {
                "tpot_slo": d,
                "workload": w,
                "best_static": best["policy"],
                "best_static_goodput": base,
                "goodput": mine["goodput"],
                "ratio": (mine["goodput"] / base) if base > 0 else None,
            }
        )
    return out
