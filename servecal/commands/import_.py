"""``servecal import``: samples composed from a public per-operator GPU profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from servecal.commands._common import output_suffix, user_errors, writable_file
from servecal.profiler.importer_registry import IMPORTERS
from servecal.util.errors import InputError

IMPORTER_HELP = f"Profile kind: {IMPORTERS.usages()}."


def register(app: typer.Typer) -> None:
    app.command(
        "import",
        help="Compose iteration samples from per-operator profiles (servecal plugins importer).",
    )(import_profile)


@user_errors
def import_profile(
    kind: str = typer.Argument(..., help=IMPORTER_HELP),
    path: Path = typer.Argument(..., help="Profile folder (or a file in it)."),
    model: str = typer.Option(..., help="Shape name (llama-3-8b, ...) or a .json/.toml file."),
    tp: int = typer.Option(1, help="Tensor-parallel degree (per-GPU share of the model)."),
    ep: int = typer.Option(
        None, help="Expert-parallel size of a MoE shape (aiconfigurator) [default: the shape's]."
    ),
    out: Path = typer.Option(Path("samples.parquet"), help="Samples file to write."),
    grid: str = typer.Option(
        None, help="JSON/TOML grid file (default: the import grid, chunks up to 16,384)."
    ),
    engine: str = typer.Option(
        None,
        help="How the engine runs a step: graph (vLLM V1, SGLang, TensorRT-LLM: one varlen "
        "attention kernel, CUDA-graph all-reduce) or eager (vLLM V0, Sarathi-Serve: a kernel "
        "per attention part, host overhead from --engine-overhead). Default: eager with "
        "--engine-overhead, else graph.",
    ),
    comm_backend: str = typer.Option(
        None,
        help="aiconfigurator all-reduce backend (default: vllm-v1 for --engine graph, auto "
        "for eager): auto (CUDA graph for decode-only "
        "iterations, eager when the iteration prefills), vllm-v1 (graph for every iteration "
        "up to --graph-max-tokens, as vLLM V1's piecewise graphs run mixed batches), "
        "graph or eager.",
    ),
    graph_max_tokens: int = typer.Option(
        512, help="vllm-v1: largest CUDA-graph capture size (tokens per iteration)."
    ),
    no_comm: bool = typer.Option(
        False, "--no-comm", help="Price the tensor-parallel all-reduces at 0 (no table needed)."
    ),
    no_pointwise: bool = typer.Option(
        False,
        "--no-pointwise",
        help="aiconfigurator: price norms, rotary, activation, adds and the KV-cache write at 0.",
    ),
    dtype: str = typer.Option(
        "bfloat16",
        help="aiconfigurator: weight dtype whose GEMM rows to read (bfloat16, fp8; nvfp4 on B200).",
    ),
    kv_dtype: str = typer.Option(
        "bfloat16",
        help="aiconfigurator: KV-cache dtype whose attention rows to read (bfloat16, fp8).",
    ),
    graph_padding: bool = typer.Option(
        False,
        "--graph-padding",
        help="--engine graph: price a step's linear, pointwise and all-reduce work on the "
        "CUDA-graph capture size it replays (vLLM V1: 1, 2, 4, multiples of 8 to 256, of 16 "
        "to 512; larger steps unpadded).",
    ),
    qk_norm: bool = typer.Option(
        False,
        "--qk-norm",
        help="aiconfigurator: the model normalises q and k per head (Qwen3): 2 more "
        "pointwise kernels a layer.",
    ),
    pointwise_device: str = typer.Option(
        None,
        help="Device whose memory bandwidth prices the pointwise kernels (a100-pcie-80gb, "
        "a100-sxm-80gb, h100-sxm, ...; default: the profile's device).",
    ),
    engine_overhead: Path = typer.Option(
        None,
        help="Host overhead of an eager engine: a JSON of floor_ms, c0_ms, c1_ms, gpu_scale, "
        "attention_scale, "
        "or a CSV of measured steps (n_decode, chunk, ctx, prefix, ms) to fit them on.",
    ),
    fixed_scales: bool = typer.Option(
        False,
        "--fixed-scales",
        help="Fitting steps: keep gpu_scale and attention_scale at 1 (the engine ran the "
        "profiled kernels on the profiled device); fit floor, c0, c1 only.",
    ),
    overhead_out: Path = typer.Option(
        None, help="Write the engine-overhead parameters used (fitted or read) to this JSON."
    ),
) -> None:
    """Import: compose per-operator medians into iteration samples (rep 0, P50 only)."""
    from servecal.costmodels.samples import write_samples
    from servecal.profiler.design import Grid
    from servecal.profiler.importers import default_comm, step_rules
    from servecal.profiler.importers import import_profile as run
    from servecal.profiler.importers.collective import CommOptions
    from servecal.profiler.importers.overhead import PARAMETERS, HostOverhead
    from servecal.profiler.shapes import ModelShape

    writable_file(output_suffix(out, (".parquet",), "a samples file"))
    if overhead_out is not None:
        if engine_overhead is None:
            raise InputError("--overhead-out needs --engine-overhead")
        writable_file(
            output_suffix(overhead_out, (".json",), "the host overhead", "--overhead-out"),
            "--overhead-out",
        )
    shape = _with_ep(ModelShape.resolve(model), ep)
    engine, _ = step_rules(engine, engine_overhead, graph_padding)
    backend = comm_backend or default_comm(kind, engine).backend
    comm = CommOptions(backend=backend, enabled=not no_comm, graph_max_tokens=graph_max_tokens)
    frame, provenance = run(
        kind,
        path,
        shape,
        tp,
        Grid.from_file(grid) if grid else None,
        comm,
        pointwise=not no_pointwise,
        pointwise_device=pointwise_device,
        overhead_file=engine_overhead,
        fit_scales=not fixed_scales,
        engine=engine,
        qk_norm=qk_norm,
        weight_dtype=dtype,
        kv_dtype=kv_dtype,
        graph_padding=graph_padding,
    )
    write_samples(frame, out, provenance)
    typer.echo(
        f"wrote {out}: {len(frame)} rows ({shape.name}, TP {tp}, {kind}; medians, rep 0; "
        f"{provenance['extrapolated_reads']} reads beyond the profiled sizes; "
        f"engine {engine}: attention {'varlen' if engine == 'graph' else 'separate'}"
        f"{'; padded to CUDA-graph capture sizes' if graph_padding else ''})"
    )
    if shape.is_moe:
        typer.echo(f"experts: {shape.moe_label}; all-to-all: {provenance['moe_all_to_all']}")
    if tp > 1:
        table = provenance["collective_table"] or "none"
        typer.echo(f"all-reduces: {table} ({provenance['collective_backend']})")
    host = provenance["engine_overhead"]
    if host is not None:
        params = {k: host[k] for k in PARAMETERS}
        typer.echo(
            f"engine overhead: floor {params['floor_ms']:.3f} ms, c0 {params['c0_ms']:.3f} ms, "
            f"c1 {params['c1_ms']:.4f} ms/request, GPU x{params['gpu_scale']:.2f}, "
            f"attention x{params['attention_scale']:.1f}"
            + (
                f" (fitted on {host['fitted_on_steps']} steps, median error "
                f"{100 * host['fit_median_relative_error']:.1f}%)"
                if "fitted_on_steps" in host
                else ""
            )
        )
        if overhead_out is not None:
            HostOverhead(**params).write(overhead_out)
            typer.echo(f"wrote {overhead_out}")


def _with_ep(shape: Any, ep: int | None) -> Any:
    """``shape`` at expert-parallel size ``ep`` (unchanged without one)."""
    if ep is None:
        return shape
    if not shape.is_moe:
        raise InputError(f"--ep {ep}: {shape.name} is not a MoE shape")
    from dataclasses import replace

    try:
        return replace(shape, ep=ep)
    except ValueError as exc:
        raise InputError(f"--ep {ep}: {exc}") from None
