"""The demo's scheduler runs: calibrated table as predictor, measured samples as truth.

One run spec per (workload, policy, TPOT target), every seed, through the
experiment layer's sweep; each run is written as a run folder
``runs/<workload>/<policy>/tpot-<D>/seed-<k>/``. Prompts are scaled and TTFT SLOs
dilated as the derived setting says (see :mod:`.setting`).

Each (spec, seed) also searches its maximum goodput (:func:`bracket_for`), so the
report ranks the policies by the highest rate they sustain within SLO and draws
their attainment against rate: at the one derived rate nearly every policy meets
its SLOs and the tables cannot tell them apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servecal.reports.demo.setting import DemoSetting


def spec_for(
    setting: DemoSetting,
    workload: str,
    policy: str,
    tpot_ms: float,
    seeds: int,
    n_requests: int,
    table_path: Path,
    samples_path: Path,
) -> Any:
    """The run spec of one cell of the demo grid (every seed)."""
    from servecal.sched.experiment import RunSpec
    from servecal.sched.policies.registry import PolicySpec

    sloweave = (
        ("aging_chunk", setting.aging_chunk),
        ("aging_ms", float(round(setting.aging_ms))),  # whole ms: the label stays short
        ("c_max", setting.c_max),
    )
    return RunSpec(
        workload=workload,
        policy=PolicySpec(policy, sloweave if policy == "sloweave" else ()),
        tpot_slo_ms=tpot_ms,
        rate=setting.rates[workload],
        n_requests=n_requests,
        seeds=tuple(range(seeds)),
        truth=f"samples:{samples_path}",
        predictor=f"table:{table_path}",
        prompt_scale=setting.token_scale,
        ttft_scale=setting.time_dilation,
        monitor=policy == "sloweave",  # the policy a deployment would monitor
        power=demo_power(samples_path),
    )


def plan_runs(
    setting: DemoSetting,
    out: Path,
    seeds: int,
    n_requests: int,
    table_path: Path,
    samples_path: Path,
) -> tuple[list[Any], list[Path]]:
    """Every run spec of the demo grid and the folder of each (its seeds go below)."""
    specs, folders = [], []
    for d in setting.tpot_targets_ms:
        for w in setting.rates:
            for p in setting.policies:
                specs.append(spec_for(setting, w, p, d, seeds, n_requests, table_path,
                                      samples_path))  # fmt: skip
                folders.append(out / w / p / f"tpot-{d:.4g}")
    return specs, folders


def feasible_setting(
    setting: DemoSetting, seeds: int, n_requests: int, table_path: Path, samples_path: Path
) -> DemoSetting:
    """``setting`` with any TPOT target that the smallest fixed chunk cannot meet at
    its search's floor rate, on some workload, lifted until it can (:mod:`.feasible`)."""
    from servecal.reports.demo.feasible import lift_targets, sustains_floor

    cheapest = setting.policies[0]  # the smallest fixed chunk

    def feasible(d: float) -> bool:
        return all(
            sustains_floor(
                spec_for(setting, w, cheapest, d, seeds, n_requests, table_path, samples_path),
                bracket_for(rate).limits()[0],
            )
            for w, rate in setting.rates.items()
        )

    lifted = lift_targets(setting.tpot_targets_ms, feasible)
    if lifted == setting.tpot_targets_ms:
        return setting
    return dataclasses.replace(
        setting, tpot_targets_ms=lifted, derived_targets_ms=setting.tpot_targets_ms
    )


#: What prices the demo's energy when its calibration had no meter (sched/power.py).
DEMO_POWER_MODEL = "a100-llama3-8b"


def demo_power(samples_path: Path) -> str | None:
    """``None`` (the samples' own measured energy) when the calibration metered energy,
    else the A100 power model: every run of a demo then names ``model:...`` as its
    source, so the energy section shows modelled joules, labelled so, not nothing."""
    from servecal.sched.experiment.models import load_truth

    measured = load_truth(f"samples:{samples_path}").energy_source == "samples"
    return None if measured else DEMO_POWER_MODEL


#: The demo's searches: from a quarter to twice the derived rate (the bracket expands
#: beyond it if needed), to 5%: the demo's runs are short (200 requests), so a finer
#: answer would be finer than their noise, and each step costs a run per cell and seed.
SEARCH_FROM, SEARCH_TO, SEARCH_TOL = 0.25, 2.0, 0.05


def bracket_for(rate: float) -> Any:
    """Where a demo cell's max-goodput search starts, around its derived ``rate``."""
    from servecal.sched.experiment import Bracket

    return Bracket(SEARCH_FROM * rate, SEARCH_TO * rate, rel_tol=SEARCH_TOL)


def run_all(
    specs: list[Any],
    folders: list[Path],
    jobs: int | None = None,
    on_progress: Callable[[Any], None] | None = None,
    search: bool = True,
) -> None:
    """Run every spec's seeds (a process pool), each with its max-goodput search unless
    ``search`` is off; Ctrl-C cancels what has not started."""
    from servecal.sched.experiment import check, sweep

    for spec in specs:
        check(spec, searching=search)
    brackets = [bracket_for(spec.rate) for spec in specs] if search else None
    sweep(specs, folders=folders, goodput=brackets, jobs=jobs, on_progress=on_progress)
