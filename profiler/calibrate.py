"""`servecal calibrate`: plan or resume a sweep, run it, write samples, fit a cost table.

Output folder::

    DIR/shards/          plan.json + one shard per measured point (resume state)
    DIR/samples.parquet  every timed iteration (samples contract) with provenance
    DIR/samples.fingerprint.json  the same provenance, readable without Parquet
    DIR/costtable.json   the fitted table (skipped when a signal stopped the run)
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from servecal.profiler.collective import SINGLE_DEVICE, Collective
from servecal.profiler.design import Grid, Point, default_grid, design_points
from servecal.profiler.energy import open_meter
from servecal.profiler.fingerprint import attention_backend, fingerprint
from servecal.profiler.model import build_model, default_dtype
from servecal.profiler.runner import ContiguousLayout, MeasureConfig, PointLayout
from servecal.profiler.shapes import ModelShape
from servecal.profiler.shards import ShardStore
from servecal.profiler.sweep import StopFlag, SweepOutcome, SweepStatus, run_sweep
from servecal.profiler.tensor_parallel import (
    RankSpec,
    TensorParallelLayout,
    check_backend,
    rank_devices,
    start_group,
)
from servecal.profiler.timing import LayerScale, make_clock
from servecal.util.errors import InputError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: Layers built when the user does not say: enough for the per-layer cost to be
#: steady, few enough that deep models' KV at large points fits in memory.
DEFAULT_LAYERS_TIMED = 4
#: Points whose repeats are interleaved on CPU (a block is also the stop granularity).
DEFAULT_CPU_BLOCK = 32


@dataclass(frozen=True)
class CalibrateConfig:
    """Options of one ``servecal calibrate`` call (``None``: default, or the plan's on resume)."""

    out: Path
    device: str = "auto"
    model: str | None = None
    budget_s: float | None = None
    repeats: int | None = None
    warmup: int = 3
    grid: str | None = None
    layers: int | None = None
    dtype: str | None = None
    threads: int | None = None
    seed: int = 0
    block: int | None = None
    resume: bool = False
    fit: bool = True
    kv_layout: str | None = None  # default "contiguous"; on resume, the plan's
    tp: int | None = None  # tensor-parallel degree, one process per rank; default 1
    kv_dtype: str | None = None  # None / "auto": the model's dtype, the only one it stores

    def __post_init__(self) -> None:
        _check_tp(self.tp)
        if self.budget_s is not None and not 0 < self.budget_s < math.inf:
            raise InputError(f"--budget must be finite seconds > 0, got {self.budget_s}")
        if self.seed < 0:
            raise InputError(f"--seed must be >= 0, got {self.seed}")
        counts = (("--repeats", self.repeats, 2), ("--layers", self.layers, 1),
                  ("--block", self.block, 1), ("--threads", self.threads, 1))  # fmt: skip
        for flag, value, least in counts:
            if value is not None and value < least:
                raise InputError(f"{flag} must be >= {least}, got {value}")
        cores = os.cpu_count() or 1
        if self.threads is not None and self.threads > cores:
            # more threads than cores time the scheduler, not the model (and huge counts
            # exhaust the process: torch crashes past a few thousand)
            raise InputError(f"--threads {self.threads}: this machine has {cores} cores")
        refuse_unrunnable_dtypes(self.dtype, self.kv_dtype)


#: Quantised dtypes servecal prices from profiles but its timed model cannot run.
QUANTISED = ("fp8", "fp8_e4m3", "fp8_e5m2", "int8", "int4", "nvfp4", "mxfp4")


def refuse_unrunnable_dtypes(dtype: str | None, kv_dtype: str | None) -> None:
    """One line for a ``--dtype`` / ``--kv-dtype`` the timed model cannot run: it multiplies
    in float32, bfloat16 or float16 and stores its KV cache in that same dtype."""
    if dtype in QUANTISED:
        raise InputError(
            f"--dtype {dtype}: the timed model runs float32, bfloat16 or float16 matrices; "
            f"price {dtype} weights with `servecal import aiconfigurator --dtype {dtype}` or "
            "time them in the engine that serves them (--engine vllm)"
        )
    if dtype is not None and dtype not in DTYPES:
        raise InputError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if kv_dtype in (None, "auto") or kv_dtype == dtype:
        return
    raise InputError(
        f"--kv-dtype {kv_dtype}: the timed model stores its KV cache in its own dtype "
        f"({dtype or 'the default'}); give --kv-dtype auto, or price an fp8 KV cache with "
        "`servecal import aiconfigurator --kv-dtype fp8`"
    )


def _check_tp(tp: Any) -> None:
    if tp is not None and (not isinstance(tp, int) or isinstance(tp, bool) or tp < 1):
        raise InputError(f"--tp must be an integer >= 1, got {tp!r}")


@dataclass
class CalibrationResult:
    out: Path
    outcome: SweepOutcome
    points: int
    rows: int
    provenance: dict[str, Any]
    metrics: dict[str, Any] = field(default_factory=dict)
    samples_path: Path | None = None
    table_path: Path | None = None


def resolve_device(spec: str) -> torch.device:
    """``auto`` → the first CUDA device, else the CPU; ``cpu``; ``cuda`` or ``cuda:N``."""
    if spec == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise InputError(f"--device {spec!r}: expected auto, cpu or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(f"--device {spec}: no CUDA device available here")
        index = device.index or 0
        if index >= torch.cuda.device_count():
            raise InputError(f"--device {spec}: only {torch.cuda.device_count()} CUDA device(s)")
        return torch.device("cuda", index)
    if device.type != "cpu":
        raise InputError(f"--device {spec!r}: expected auto, cpu or cuda:N")
    return device


def default_threads() -> int:
    """Half the usable cores (at least 1, at most 4): steadier timings on a shared host."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(4, (cores or 2) // 2))


#: Layouts the profiler itself provides; callers add theirs (see :func:`calibrate`).
BUILTIN_LAYOUTS: dict[str, Callable[[], PointLayout]] = {"contiguous": ContiguousLayout}


def _check_parallel(cfg: CalibrateConfig, shape: ModelShape, device: torch.device, tp: int) -> None:
    """What a tensor-parallel size needs: a shape it divides, a dense model, the
    contiguous layout, a collective backend and enough devices."""
    shape.check_tp(tp)
    if shape.is_moe and tp > 1:
        raise InputError(
            f"{shape.name}: a MoE shape calibrates at --tp 1 (expert parallelism is the "
            "shape's ep, emulated on one process); MoE at TP > 1 is not built"
        )
    if tp > 1:
        if (cfg.kv_layout or "contiguous") != "contiguous":
            raise InputError(f"--kv-layout {cfg.kv_layout}: --tp > 1 runs the contiguous layout")
        check_backend(device)
        rank_devices(device, tp)  # enough GPUs?


def _new_plan(cfg: CalibrateConfig, device: torch.device) -> dict[str, Any]:
    default_model = "tiny" if device.type == "cpu" else "llama-3-8b"
    shape = ModelShape.resolve(cfg.model or default_model)
    grid = Grid.from_file(cfg.grid) if cfg.grid else default_grid(device.type)
    points = design_points(grid, np.random.default_rng(cfg.seed))
    dtype = cfg.dtype or str(default_dtype(device)).removeprefix("torch.")
    layers = cfg.layers or min(shape.n_layers, DEFAULT_LAYERS_TIMED)
    if layers > shape.n_layers:
        raise InputError(f"--layers {layers}: {shape.name} has only {shape.n_layers} layers")
    tp = cfg.tp or 1
    _check_parallel(cfg, shape, device, tp)
    return {
        "shape": shape.to_dict(),
        "device": str(device),
        "dtype": dtype,
        "layers_timed": layers,
        "repeats": cfg.repeats or 20,
        "warmup": cfg.warmup,
        "seed": cfg.seed,
        "kv_layout": cfg.kv_layout or "contiguous",
        "tp": tp,
        "grid": grid.to_dict(),
        "points": [[p.n_decode, p.chunk, p.ctx, p.prefix] for p in points],
    }


def _check_resume(
    plan: dict[str, Any], cfg: CalibrateConfig, device: torch.device, where: Path
) -> None:
    """A resumed run must measure what it started measuring."""
    asked = {
        "model": None if cfg.model is None else ModelShape.resolve(cfg.model).to_dict(),
        "device": None if cfg.device == "auto" else str(device),
        "repeats": cfg.repeats,
        "layers_timed": cfg.layers,
        "dtype": cfg.dtype,
        "grid": None if cfg.grid is None else Grid.from_file(cfg.grid).to_dict(),
        "kv_layout": cfg.kv_layout,
        "tp": cfg.tp,
    }
    stored = {"kv_layout": "contiguous", "tp": 1, **plan, "model": plan["shape"]}
    for key, value in asked.items():
        if value is not None and value != stored[key]:
            raise InputError(
                f"{where}: --resume with a different {key} than the run was started with "
                f"({stored[key] if key != 'model' else stored['shape']['name']}); "
                "drop the option or use another --out"
            )


def _quiet(_: object) -> None:
    pass


def calibrate(
    cfg: CalibrateConfig,
    layouts: Mapping[str, Callable[[], PointLayout]] | None = None,
    *,
    on_message: Callable[[str], None] = _quiet,
    on_progress: Callable[[SweepStatus], None] | None = None,
) -> CalibrationResult:
    """Run (or resume) a calibration into ``cfg.out``; see the module docstring for files.

    ``layouts`` adds KV layouts ``cfg.kv_layout`` may name to :data:`BUILTIN_LAYOUTS`
    (the CLI adds the torch executor's ``paged`` one). ``on_message`` receives one
    line per notice (device chosen, energy meter, what was measured);
    ``on_progress`` the sweep's progress.
    """
    available = {**BUILTIN_LAYOUTS, **(layouts or {})}
    if cfg.kv_layout is not None and cfg.kv_layout not in available:
        raise InputError(
            f"--kv-layout must be one of {', '.join(available)}, got {cfg.kv_layout!r}"
        )
    requested = resolve_device(cfg.device)
    store = ShardStore(cfg.out)
    with store.locked():  # one writer: a second calibrate (or --resume) on this folder stops
        return _calibrate(cfg, store, requested, available, on_message, on_progress)


def _use_device(device: torch.device, threads: int | None) -> int | None:
    """Make ``device`` this process's current one; on a CPU, set and return torch's threads."""
    if device.type == "cuda":
        torch.cuda.set_device(device)  # events and default streams follow the current device
        return None
    chosen = threads or default_threads()
    torch.set_num_threads(chosen)
    return chosen


def _open_plan(
    cfg: CalibrateConfig, store: ShardStore, requested: torch.device
) -> tuple[dict[str, Any], torch.device]:
    """The run's plan and device: a resumed run's as written (checked against ``cfg``),
    or a new plan written now."""
    if cfg.resume:
        plan = store.read_plan()
        _check_resume(plan, cfg, requested, store.plan_path)
        store.clean_temporaries()
        return plan, resolve_device(plan["device"])
    if store.exists() or (cfg.out / "samples.parquet").exists():
        raise InputError(f"{cfg.out}: already holds a calibration; pass --resume or another --out")
    plan = _new_plan(cfg, requested)
    store.write_plan(plan)
    return plan, requested


def _calibrate(
    cfg: CalibrateConfig,
    store: ShardStore,
    requested: torch.device,
    available: Mapping[str, Callable[[], PointLayout]],
    on_message: Callable[[str], None],
    on_progress: Callable[[SweepStatus], None] | None,
) -> CalibrationResult:
    plan, device = _open_plan(cfg, store, requested)
    if cfg.device == "auto":
        on_message(f"device: {device} ({'CUDA' if device.type == 'cuda' else 'no CUDA device'})")

    try:
        shape = ModelShape(**plan["shape"])
    except (TypeError, ValueError) as exc:
        raise InputError(f"{store.plan_path}: damaged plan, its shape: {exc}") from None
    points = [Point(*p) for p in plan["points"]]
    layout_name = plan.get("kv_layout", "contiguous")
    if layout_name not in available:
        raise InputError(f"{store.plan_path}: KV layout {layout_name!r} is not available here")
    threads = _use_device(device, cfg.threads)
    tp = plan.get("tp", 1)
    dtype, layers = DTYPES[plan["dtype"]], plan["layers_timed"]
    with ExitStack() as ranks:
        layout: PointLayout = available[layout_name]()
        collective: Collective = SINGLE_DEVICE
        if tp > 1:  # rank 0 here, ranks 1..tp-1 in their own processes (tensor_parallel.py)
            check_backend(device)
            template = RankSpec(
                rank=0, world=tp, init_method="", device=str(device), shape=plan["shape"],
                dtype=dtype, layers=layers, seed=plan["seed"], threads=threads,
                layout=available[layout_name],
            )  # fmt: skip
            group = ranks.enter_context(start_group(template, rank_devices(device, tp)))
            on_message(f"tensor parallel: {tp} ranks over {group.backend}, rank 0 times")
            collective, layout = group.collective, TensorParallelLayout(layout, group)
        try:
            model = build_model(shape, device, dtype, layers, plan["seed"], collective)
        except InputError:  # the shape does not fit: nothing measured, nothing to resume
            if not cfg.resume:
                store.discard_plan()
            raise
        scale = LayerScale(layers, shape.n_layers)
        meter, notice = open_meter(device, devices=tp)
        if notice:
            on_message(notice)
        provenance = fingerprint(model, scale, threads, attention_backend(model))
        provenance.update(
            energy_source=meter.source if meter is not None else None,
            energy_notice=notice,
            repeats=plan["repeats"],
            warmup=plan["warmup"],
            seed=plan["seed"],
            grid=plan["grid"],
            budget_s=cfg.budget_s,
            kv_layout=layout_name,
        )
        # Interleave repeats over a few points on CPU (shared hosts are bursty); on a GPU
        # one point at a time, since every live point holds its KV in device memory.
        measure = MeasureConfig(
            repeats=plan["repeats"],
            warmup=plan["warmup"],
            block=cfg.block or (1 if device.type == "cuda" else DEFAULT_CPU_BLOCK),
        )
        stop = StopFlag()
        with stop.installed():
            outcome = run_sweep(
                model,
                points,
                store,
                scale=scale,
                measure=measure,
                clock=make_clock(device),
                meter=meter,
                stop=stop,
                rng=np.random.default_rng([plan["seed"], len(store.done())]),
                budget_s=cfg.budget_s,
                layout=layout,
                on_progress=on_progress,
            )
    provenance["infeasible_points"] = store.infeasible()
    provenance["points_planned"] = len(points)
    return _finish(cfg, store, outcome, provenance, on_message, len(points))


def _finish(
    cfg: CalibrateConfig,
    store: ShardStore,
    outcome: SweepOutcome,
    provenance: dict[str, Any],
    on_message: Callable[[str], None],
    planned: int,
) -> CalibrationResult:
    from servecal.costmodels.samples import write_samples

    frame = store.frame()
    points = 0 if frame.empty else len(frame.groupby(["n_decode", "chunk", "ctx", "prefix"]))
    result = CalibrationResult(cfg.out, outcome, points, len(frame), provenance)
    on_message(
        f"measured {points}/{planned} points, {len(frame)} timed iterations "
        f"({len(provenance['infeasible_points'])} infeasible); stopped: {outcome.stopped_by}"
    )
    if frame.empty and outcome.stopped_by == "signal":
        on_message(
            "interrupted before the first point was measured; the plan is kept: "
            f"continue with --resume --out {cfg.out}"
        )
        return result
    if frame.empty:
        raise InputError(f"{cfg.out}: no point was measured (budget too small?); nothing to write")
    provenance["points_measured"] = points
    samples_path = cfg.out / "samples.parquet"
    write_samples(frame, samples_path, provenance)
    result.samples_path = samples_path
    if outcome.stopped_by == "signal":
        on_message(f"interrupted: measured points are kept; continue with --resume --out {cfg.out}")
        return result
    if cfg.fit:
        from servecal.costmodels.fit import fit_cost_table

        fitted = fit_cost_table(frame, provenance)
        table_path = cfg.out / "costtable.json"
        fitted.table.save(table_path)
        result.table_path = table_path
        result.metrics = dict(fitted.metrics)
    return result
