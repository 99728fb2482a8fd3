"""The demo pipeline: calibrate → fit → derive the setting → simulate → report.

Each step's output stays in ``OUT`` (``calibration/``, ``runs/``, ``report/``), so an
interrupted demo loses nothing measured: rerunning it resumes the calibration (or
reuses a finished one) and redoes only the cheap simulation and report.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servecal.costmodels.crossval import folds_for
from servecal.reports.demo.setting import (
    WORKLOADS,
    Axes,
    DemoSetting,
    derive_setting,
    grid_for,
    refine_axis,
    token_scale,
)
from servecal.reports.demo.simulation import (
    DEMO_POWER_MODEL,
    demo_power,
    feasible_setting,
    plan_runs,
    run_all,
)
from servecal.util.errors import InputError

#: Share of the budget the calibration sweep may use; simulation and report follow.
CALIBRATION_SHARE = 0.45
POINT_AXES = ("n_decode", "chunk", "ctx", "prefix")
#: Extra sweeps (each this share of the budget) when too few rows were timed.
MAX_EXTENSIONS = 2
EXTENSION_SHARE = 0.25
#: Rows the conformal margin needs to certify 99% coverage (fit's rule), and the
#: share of points each of fit's cross-validation folds holds out.
MIN_HELDOUT_ROWS = 99
FOLD_SHARE = 0.2


@dataclass(frozen=True)
class DemoConfig:
    """Options of ``servecal demo``."""

    out: Path = Path("servecal-demo")
    budget_s: float = 240.0
    device: str = "auto"
    seeds: int = 2
    n_requests: int = 200
    repeats: int = 10
    jobs: int | None = None
    token_scale: float | None = None
    workloads: tuple[str, ...] = WORKLOADS

    def __post_init__(self) -> None:
        if self.token_scale is not None and not 0 < self.token_scale <= 1:
            raise InputError(f"--token-scale must be in (0, 1], got {self.token_scale:g}")
        unknown = sorted(set(self.workloads) - set(WORKLOADS))
        if unknown or not self.workloads:
            raise InputError(f"demo workloads must be among {', '.join(WORKLOADS)}: {unknown}")
        if not self.budget_s >= 20:
            raise InputError(f"--budget must be >= 20 seconds, got {self.budget_s:g}")
        if self.seeds < 1 or self.n_requests < 10 or self.repeats < 2:
            raise InputError("demo needs seeds >= 1, n_requests >= 10 and repeats >= 2")


def _quiet(_: object) -> None:
    pass


@dataclass(frozen=True)
class DemoCallbacks:
    """How the demo reports: ``message`` one line at a time; ``calibration`` the
    profiler's sweep status; ``simulation`` the experiment sweep's progress."""

    message: Callable[[str], None] = _quiet
    calibration: Callable[[Any], None] | None = None
    simulation: Callable[[Any], None] | None = None


@dataclass(frozen=True)
class DemoResult:
    report: Path
    markdown: Path
    calibration: Path
    runs: Path
    setting: DemoSetting
    seconds: dict[str, float]


def check_enough_rows(points: int, rows_per_point: int) -> None:
    """Refuse (InputError) a calibration too small for ``fit`` to certify the P99
    margin with each cross-validation fold tested by a margin blind to it."""
    folds = folds_for(FOLD_SHARE, points)
    if points * rows_per_point * (folds - 1) / folds < MIN_HELDOUT_ROWS:
        raise InputError(
            f"the calibration measured only {points} points x {rows_per_point} repeats "
            f"within the budget; the P99 margin needs about "
            f"{math.ceil(MIN_HELDOUT_ROWS * folds / (folds - 1))} timed iterations: raise --budget"
        )


def _measure(
    config: DemoConfig, device: str, budget_s: float, grid: dict | None, say: DemoCallbacks
) -> None:
    """One budgeted sweep into ``OUT/calibration`` (resuming one that was started)."""
    from servecal.profiler.calibrate import CalibrateConfig, calibrate

    cal = config.out / "calibration"
    resume = (cal / "shards").is_dir()
    grid_path = None
    if grid is not None and not resume:
        grid_path = config.out / "demo-grid.json"
        grid_path.write_text(json.dumps(grid))
    outcome = calibrate(
        CalibrateConfig(
            out=cal,
            device=device,
            budget_s=budget_s,
            repeats=None if resume else config.repeats,
            grid=None if grid_path is None else str(grid_path),
            resume=resume,
            fit=False,
        ),
        on_message=say.message,
        on_progress=say.calibration,
    ).outcome
    if outcome.stopped_by == "signal":
        raise KeyboardInterrupt


def _point_sizes(cal: Path):  # noqa: ANN202 - a pandas Series
    from servecal.costmodels.samples import read_samples

    samples = read_samples(cal / "samples.parquet")
    return samples, samples.frame.groupby(["n_decode", "chunk", "ctx", "prefix"]).size()


def calibrate_step(config: DemoConfig, say: DemoCallbacks) -> tuple[Path, bool, dict]:
    """Measure (or resume, or reuse) the calibration and fit its table.

    If the budget ran out before enough iterations were timed to certify the P99
    margin (a slow or busy machine), the sweep is extended, at most
    ``MAX_EXTENSIONS`` times by ``EXTENSION_SHARE`` of the budget, and says so.
    """
    from servecal.costmodels.fit import fit_cost_table
    from servecal.profiler.calibrate import resolve_device

    device = resolve_device(config.device)
    on_gpu = device.type == "cuda"
    cal = config.out / "calibration"
    table_path = cal / "costtable.json"
    if table_path.is_file():
        say.message(f"reusing the calibration in {cal} (delete it to measure again)")
        return cal, on_gpu, {}
    grid = grid_for(on_gpu, token_scale(on_gpu, config.token_scale))
    if not (cal / "samples.parquet").is_file():
        _measure(config, str(device), CALIBRATION_SHARE * config.budget_s, grid, say)
    samples, sizes = _point_sizes(cal)
    for extension in range(MAX_EXTENSIONS + 1):
        try:
            check_enough_rows(len(sizes), int(sizes.min()))
            break
        except InputError:
            if extension == MAX_EXTENSIONS or not (cal / "shards").is_dir():
                raise
            extra = EXTENSION_SHARE * config.budget_s
            say.message(
                f"{int(sizes.sum())} timed iterations are too few to certify the P99 margin; "
                f"measuring {extra:.0f} s more (this machine is slower or busier than the "
                "budget assumed)"
            )
            before = int(sizes.sum())
            _measure(config, str(device), extra, grid, say)
            samples, sizes = _point_sizes(cal)
            if int(sizes.sum()) == before:  # the grid is exhausted: more time cannot help
                raise
    say.message("fitting the cost table")
    fitted = fit_cost_table(
        samples.frame,
        {"source": str(cal / "samples.parquet"), **samples.provenance},
        fold_share=FOLD_SHARE,
        grid={a: refine_axis(sorted(samples.frame[a].unique())) for a in POINT_AXES},
    )
    # The demo's truth replays the measured repeats of the *nearest* calibrated point:
    # a step function of the chunk. Interpolating the table between grid points would
    # price a chunk just past a step below the time the truth then draws, and SLOWeave,
    # which fills its budget to the last token, would plan on exactly those chunks
    # (measured: 0.16x of the best fixed chunk on `long` at the middle target). So the
    # demo's table rounds up on its finer compile grid instead.
    table = fitted.table.with_between("round_up")  # a new table: its own content hash
    table.save(table_path)
    m = fitted.metrics
    say.message(
        f"cost table: {fitted.model}; held-out P50 MAPE {100 * m['p50_mape']:.1f}%, "
        f"P99+δ coverage {100 * m['p99_coverage']:.1f}%"
    )
    return cal, on_gpu, dict(m)


def simulate_step(
    config: DemoConfig, cal: Path, on_gpu: bool, say: DemoCallbacks
) -> tuple[Path, DemoSetting]:
    """Derive targets and rates from the table; run the scheduler grid."""
    from servecal.costmodels import CostTable

    table = CostTable.load(cal / "costtable.json")
    grid = table.axes
    setting = derive_setting(
        table,
        Axes(tuple(grid["n_decode"]), max(grid["chunk"]), tuple(grid["ctx"])),
        token_scale(on_gpu, config.token_scale),
        config.workloads,
    )
    setting = feasible_setting(
        setting, config.seeds, config.n_requests, cal / "costtable.json", cal / "samples.parquet"
    )
    for line in setting.describe():
        say.message(line)
    runs = config.out / "runs"
    shutil.rmtree(runs, ignore_errors=True)  # runs of an earlier setting must not mix in
    specs, folders = plan_runs(
        setting, runs, config.seeds, config.n_requests, cal / "costtable.json",
        cal / "samples.parquet",
    )  # fmt: skip
    run_all(specs, folders, config.jobs, say.simulation)
    return runs, setting


def _energy_preface(cal: Path) -> list[str]:
    """One line when the demo's energy is modelled (no meter during calibration)."""
    if demo_power(cal / "samples.parquet") is None:
        return []
    return [
        "Energy: the calibration had no energy meter (no NVML, no RAPL package zones), so "
        f"the simulated iterations are priced by the power model {DEMO_POWER_MODEL} "
        "(docs/energy.md: an A100's power by iteration composition, fitted from Splitwise's "
        "and ML.ENERGY's measurements) on this device's iteration times: modelled, not "
        "measured, and named as such in the energy section."
    ]


def run_demo(config: DemoConfig, say: DemoCallbacks | None = None) -> DemoResult:
    """The whole demo; ``KeyboardInterrupt`` propagates after the pool is shut down."""
    from servecal.reports.page import build_report

    say = say or DemoCallbacks()
    config.out.mkdir(parents=True, exist_ok=True)
    clock = {"start": time.perf_counter()}
    cal, on_gpu, _ = calibrate_step(config, say)
    clock["calibrated"] = time.perf_counter()
    runs, setting = simulate_step(config, cal, on_gpu, say)
    clock["simulated"] = time.perf_counter()
    say.message("writing the report")
    seconds = {
        "calibrate + fit": clock["calibrated"] - clock["start"],
        "simulate": clock["simulated"] - clock["calibrated"],
    }
    preface = [
        "This report was written by `servecal demo`: it calibrated this device, fitted "
        "a cost table, and simulated the schedulers with that table as the predictor and "
        "the measured samples as the truth (each iteration's time drawn from the "
        "measured repeats of the nearest calibrated point).",
        "The cost table is compiled on a grid finer than the measured one (steps of at "
        "most 1.5x between neighbours on every axis, the fitted model filling in) and "
        "answers between grid points by rounding up (the truth replays the nearest "
        "measured point, a step function that interpolation would under-price), so a "
        "coarse grid would make SLOWeave pay for the next measured chunk size. The P99 "
        "margin is still calibrated and tested on held-out measured points.",
        *setting.describe(),
        *_energy_preface(cal),
        f"{config.seeds} seed(s) per cell, {config.n_requests} requests per run. "
        + "Time spent: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items())
        + ".",
    ]
    files = build_report(
        [cal, runs], config.out / "report", title="servecal demo report", preface=preface
    )
    seconds["report"] = time.perf_counter() - clock["simulated"]
    return DemoResult(files.html, files.markdown, cal, runs, setting, seconds)
