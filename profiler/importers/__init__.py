"""Importers: iteration-level samples composed from public per-operator GPU profiles.

``import_profile(kind, path, shape, tp, grid, comm)`` returns samples rows
(medians, ``rep = 0``, ``energy_j`` null) on a design grid plus the provenance
that says where they came from and what was interpolated or approximated. ``kind``
is a name of :data:`~servecal.profiler.importer_registry.IMPORTERS`
(``aiconfigurator``, ``vidur``) or a user's ``module:Class`` (docs/plugins.md).
aiconfigurator's tables lack the pointwise kernels; they are priced from bytes moved
(:mod:`.pointwise`) unless ``pointwise=False``. An eager engine's host overhead
(:mod:`.overhead`) is added when ``overhead_file`` gives its parameters (JSON) or
measured steps to fit them on (CSV).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from servecal.profiler.design import IMPORT_GRID, Grid, Point, design_points
from servecal.profiler.importer_registry import IMPORTERS
from servecal.profiler.importers.aiconfigurator import AiConfiguratorSource
from servecal.profiler.importers.collective import CommOptions
from servecal.profiler.importers.compose import StepComposition, compose, compose_row
from servecal.profiler.importers.interp import ExtrapolationLog
from servecal.profiler.importers.overhead import (
    HostOverhead,
    fit_overhead,
    read_parameters,
    read_steps,
    relative_errors,
    requests_in_batch,
)
from servecal.profiler.shapes import ModelShape
from servecal.util.errors import InputError

#: Names of the built-in importers (``servecal plugins importer`` lists them).
SOURCES = IMPORTERS.names()
#: How the engine runs a step (docs/profiler.md, "How a step is composed"): ``graph``
#: (vLLM V1, SGLang, TensorRT-LLM: CUDA graphs, one varlen attention kernel, no host cost
#: per request) or ``eager`` (vLLM V0, Sarathi-Serve, Splitwise's vLLM: a kernel per
#: attention part, the host-overhead model of ``--engine-overhead``).
ENGINES = ("graph", "eager")


def step_rules(
    engine: str | None, overhead_file: Any, graph_padding: bool = False
) -> tuple[str, StepComposition]:
    """The engine mode (default: eager when a host-overhead file is given, else graph) and
    the step composition it implies; ``graph_padding``: a graph engine's step runs the
    CUDA graph captured at the next size up (vLLM V1's capture sizes)."""
    if engine is None:
        engine = "eager" if overhead_file is not None else "graph"
    if engine not in ENGINES:
        raise InputError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "graph" and overhead_file is not None:
        raise InputError("--engine-overhead models an eager engine's host time; use --engine eager")
    if engine == "graph":
        return engine, StepComposition("varlen", "graph" if graph_padding else "none")
    if graph_padding:
        raise InputError("--graph-padding pads to CUDA-graph capture sizes; use --engine graph")
    return engine, StepComposition("separate")


def default_comm(kind: str, engine: str) -> CommOptions:
    """A graph engine's all-reduce: vLLM V1's (graph up to its capture size) where the
    profile has both backends (aiconfigurator); otherwise the source's default."""
    return (
        CommOptions("vllm-v1") if engine == "graph" and kind == "aiconfigurator" else CommOptions()
    )


def import_profile(
    kind: str,
    path: str | Path,
    shape: ModelShape,
    tp: int = 1,
    grid: Grid | None = None,
    comm: CommOptions | None = None,
    pointwise: bool = True,
    pointwise_device: str | None = None,
    overhead_file: str | Path | None = None,
    fit_scales: bool = True,
    engine: str | None = None,
    qk_norm: bool = False,
    weight_dtype: str = "bfloat16",
    kv_dtype: str = "bfloat16",
    graph_padding: bool = False,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Composed samples for ``shape`` at TP ``tp`` on ``grid`` (default: the import grid,
    chunks up to 16,384).

    ``comm`` says how the tensor-parallel all-reduces are priced (default: from the
    profile's collective table, backend ``auto``; a missing table at ``tp > 1`` is
    an :class:`InputError` unless ``comm.enabled`` is False). ``pointwise`` /
    ``pointwise_device``: aiconfigurator only (Vidur measured its pointwise ops).
    ``overhead_file``: host-overhead parameters (.json) or measured steps (.csv) to fit
    them on (``fit_scales=False``: the two kernel scales stay 1). ``engine``: ``graph`` or
    ``eager`` (:data:`ENGINES`; default eager with ``overhead_file``, else graph): the step
    composition and, when ``comm`` is None, the all-reduce backend. ``qk_norm``:
    aiconfigurator, price Qwen3's per-head q and k norms too. ``weight_dtype`` /
    ``kv_dtype``: aiconfigurator, read the GEMM rows of that weight dtype and the attention
    rows of that KV-cache dtype (``fp8``); both are recorded in the fingerprint.
    ``graph_padding``: ``--engine graph`` only, price the linear, pointwise and collective
    work on the CUDA-graph capture size a step replays (:func:`step_rules`)."""
    if kind != "aiconfigurator" and (weight_dtype, kv_dtype) != ("bfloat16", "bfloat16"):
        raise InputError("--dtype/--kv-dtype: only aiconfigurator profiles carry fp8 rows")
    if kind not in IMPORTERS and ":" not in kind:
        raise InputError(f"unknown profile kind {kind!r}; choose {IMPORTERS.usages()}")
    if tp < 1:
        raise InputError(f"--tp must be >= 1, got {tp}")
    if not Path(path).exists():
        raise InputError(f"{path}: no such file or folder")
    engine, composition = step_rules(engine, overhead_file, graph_padding)
    comm = comm or default_comm(kind, engine)
    log = ExtrapolationLog()
    if kind == "aiconfigurator":  # the one importer with pointwise options
        source = AiConfiguratorSource(
            path, shape, tp, log, comm, pointwise, pointwise_device, qk_norm,
            weight_dtype, kv_dtype,
        )  # fmt: skip
    else:
        source = IMPORTERS.call(kind, path, shape, tp, log, comm)
    host: dict[str, Any] = {"engine_overhead": None}
    model = None
    if overhead_file is not None:  # read (and fit) first: a bad file fails before the grid
        model, host = engine_overhead(Path(overhead_file), source, shape, fit_scales, composition)
        log.count = 0  # extrapolated_reads counts the grid's rows, not the fitted steps'
    grid = grid or IMPORT_GRID
    points = design_points(grid, np.random.default_rng(0))
    try:
        frame = compose(source, shape, points, composition)
        source_provenance = source.provenance()
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a user's importer (module:Class), any failure
        if kind in IMPORTERS:
            raise
        raise InputError(f"servecal import {kind}: {type(exc).__name__}: {exc}") from None
    if model is not None:
        frame = add_overhead(frame, model)
    provenance = {
        "source": f"servecal import {kind}",
        **source_provenance,
        "model": shape.name,
        "model_shape": shape.to_dict(),
        "model_hash": shape.hash,
        "tp": tp,
        "engine": engine,
        "step_composition": (
            "one flattened forward over n + c tokens (linear, pointwise, collectives, "
            f"embedding: one launch each); attention: {composition.attention}; "
            f"token padding: {composition.padding}"
        ),
        "dtype": weight_dtype,
        "kv_dtype": kv_dtype,
        "rows": "medians (rep 0): P50 only; the profile carries no tail",
        "grid": grid.to_dict(),
        "extrapolated_reads": log.count,
        **host,
    }
    return frame, provenance


def add_overhead(frame: pd.DataFrame, model: HostOverhead) -> pd.DataFrame:
    """``frame`` with ``ms`` = the host-overhead model's step and ``op_host_ms`` = its share."""
    out = frame.copy()
    gpu = out["ms"].to_numpy(dtype=float)
    attention = (out["op_attn_decode_ms"] + out["op_attn_prefill_ms"]).to_numpy(dtype=float)
    step = model.step_ms(gpu, requests_in_batch(out["n_decode"], out["chunk"]), attention)
    out["op_host_ms"] = step - gpu
    out["ms"] = step
    return out


def engine_overhead(
    path: Path,
    source: Any,
    shape: ModelShape,
    fit_scales: bool = True,
    composition: StepComposition | None = None,
) -> tuple[HostOverhead, dict[str, Any]]:
    """The overhead model from ``path`` (.json parameters, or .csv steps fitted against the
    composed GPU time of the same steps) and its provenance."""
    if not path.is_file():
        raise InputError(f"--engine-overhead {path}: no such file")
    if path.suffix.lower() == ".json":
        model = read_parameters(path)
        return model, {"engine_overhead": {**model.to_dict(), "from": str(path)}}
    if path.suffix.lower() != ".csv":
        raise InputError(f"--engine-overhead {path}: expected a .json (parameters) or .csv (steps)")
    steps = read_steps(path)
    points = [
        Point(int(r.n_decode), int(r.chunk), int(r.ctx), int(r.prefix))
        for r in steps.itertuples(index=False)
    ]
    rows = [compose_row(source, shape, p, composition) for p in points]
    gpu_ms = np.array([r["ms"] for r in rows])
    attention = np.array([r["op_attn_decode_ms"] + r["op_attn_prefill_ms"] for r in rows])
    n = requests_in_batch(steps["n_decode"], steps["chunk"])
    model = fit_overhead(gpu_ms, n, steps["ms"], attention, fit_scales)
    predicted = model.step_ms(gpu_ms, n, attention)
    error = float(np.median(relative_errors(predicted, steps["ms"])))
    return model, {
        "engine_overhead": {
            **model.to_dict(),
            "from": str(path),
            "fitted_on_steps": len(steps),
            "fit_median_relative_error": error,
            "model": "step = max(gpu_scale * (GPU - attention) + attention_scale * attention, "
            "floor_ms) + c0_ms + c1_ms * n (n = requests in the batch)",
        }
    }
