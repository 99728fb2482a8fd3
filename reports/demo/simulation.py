"""The demo's scheduler runs: calibrated table as predictor, measured samples as truth.

One run spec per (workload, policy, TPOT target), every seed, through the
experiment layer's sweep; each run is written as a run folder
``runs/<workload>/<policy>/tpot-<D>/seed-<k>/``. Prompts are scaled and TTFT SLOs
dilated as the derived setting says (see :mod:`.setting`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from servecal.reports.demo.setting import DemoSetting


def plan_runs(
    setting: DemoSetting,
    out: Path,
    seeds: int,
    n_requests: int,
    table_path: Path,
    samples_path: Path,
) -> tuple[list[Any], list[Path]]:
    """Every run spec of the demo grid and the folder of each (its seeds go below)."""
    from servecal.sched.experiment import RunSpec
    from servecal.sched.policies.registry import PolicySpec

    sloweave = (
        ("aging_chunk", setting.aging_chunk),
        ("aging_ms", float(setting.aging_ms)),
        ("c_max", setting.c_max),
    )
    specs, folders = [], []
    for d in setting.tpot_targets_ms:
        for w, rate in setting.rates.items():
            for p in setting.policies:
                specs.append(
                    RunSpec(
                        workload=w,
                        policy=PolicySpec(p, sloweave if p == "sloweave" else ()),
                        tpot_slo_ms=d,
                        rate=rate,
                        n_requests=n_requests,
                        seeds=tuple(range(seeds)),
                        truth=f"samples:{samples_path}",
                        predictor=f"table:{table_path}",
                        prompt_scale=setting.token_scale,
                        ttft_scale=setting.time_dilation,
                        monitor=p == "sloweave",  # the policy a deployment would monitor
                    )
                )
                folders.append(out / w / p / f"tpot-{d:.4g}")
    return specs, folders


def run_all(
    specs: list[Any],
    folders: list[Path],
    jobs: int | None = None,
    on_progress: Callable[[Any], None] | None = None,
) -> None:
    """Run every spec's seeds (a process pool); Ctrl-C cancels what has not started."""
    from servecal.sched.experiment import check, sweep

    for spec in specs:
        check(spec)
    sweep(specs, folders=folders, jobs=jobs, on_progress=on_progress)
