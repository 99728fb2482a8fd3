"""``servecal calibrate``: time iterations on this device and fit a cost table."""

from __future__ import annotations

from pathlib import Path

import typer

from servecal.commands._common import EXIT_INTERRUPTED, user_errors
from servecal.util.errors import InputError


def register(app: typer.Typer) -> None:
    app.command(
        "calibrate",
        help="Time iterations on this device over (n, chunk, ctx, prefix); fit a cost table.",
    )(calibrate)


@user_errors
def calibrate(
    device: str = typer.Option("auto", help="auto (first CUDA device, else CPU), cpu or cuda:N."),
    model: str = typer.Option(
        None,
        help="Shape: tiny, llama-3-8b, llama-3-70b, qwen2.5-14b, mistral-7b or a .json/.toml "
        "file. Default: tiny on CPU, llama-3-8b on CUDA.",
    ),
    budget: float = typer.Option(None, help="Stop between points after this many seconds."),
    repeats: int = typer.Option(None, help="Timed repeats per point (default 20)."),
    out: Path = typer.Option(Path("calibration"), help="Output folder."),
    resume: bool = typer.Option(False, "--resume", help="Continue a stopped run in --out."),
    grid: str = typer.Option(None, help="JSON/TOML file with n_decode, chunk, ctx, prefix lists."),
    layers: int = typer.Option(None, help="Layers to build and time (scaled to the model's)."),
    dtype: str = typer.Option(None, help="float32, bfloat16 or float16 (default: bf16 on CUDA)."),
    kv_dtype: str = typer.Option(
        None, help="KV-cache dtype: auto (the model's, the only one the timed model stores)."
    ),
    threads: int = typer.Option(None, help="torch threads on CPU (default: half the cores)."),
    seed: int = typer.Option(0, min=0, help="Seed of the point order and weights."),
    block: int = typer.Option(
        None, help="Points whose repeats are interleaved (default 32 on CPU, 1 on CUDA)."
    ),
    fit: bool = typer.Option(True, "--fit/--no-fit", help="Fit costtable.json after the sweep."),
    kv_layout: str = typer.Option(
        None,
        help="contiguous (the profiler's: every decode at ctx) or paged (the torch "
        "executor's pool, ragged moving decode groups; for --backend torch tables). "
        "Default contiguous; on --resume, the run's.",
    ),
    tp: int = typer.Option(
        None,
        help="Tensor-parallel degree: one process per rank (GPUs device..device+N-1 over "
        "NCCL; CPU processes over gloo), rank 0's iteration timed with its all-reduces. "
        "Default 1; on --resume, the run's.",
    ),
    engine: str = typer.Option(
        "servecal",
        help="servecal (time servecal's own transformer) or vllm (time the steps of a real "
        "vLLM engine, as its serving loop and the plug-in's run log see them).",
    ),
    server_python: str = typer.Option(
        None,
        "--server-python",
        help="With --engine vllm: the Python that has vLLM [default: $SERVECAL_VLLM_CPU_PYTHON, "
        "else this Python when it has vLLM].",
    ),
    model_dir: Path = typer.Option(
        None,
        "--model-dir",
        help="With --engine vllm: a model folder (its weights); default a dummy --model shape.",
    ),
    kv_cache_bytes: int = typer.Option(
        None, min=1, help="With --engine vllm: vLLM's KV cache (default: sized for the grid)."
    ),
    kv_block_size: int = typer.Option(
        None,
        "--kv-block-size",
        min=1,
        help="With --engine vllm: vLLM's KV block size, as the served engine's (default: "
        "vLLM's; the CPU engine takes multiples of 32).",
    ),
    nice: int = typer.Option(
        None,
        help="With --engine vllm: the engine's niceness, -20..19 (-20 on a shared host keeps "
        "neighbours' load out of its steps; below 0 needs root). Default: this process's.",
    ),
) -> None:
    """Calibrate: sweep the grid, write samples.parquet (+ its fingerprint) + costtable.json."""

    from servecal.commands._runs import Bars, say
    from servecal.profiler.calibrate import CalibrateConfig
    from servecal.profiler.calibrate import calibrate as run
    from servecal.sched.torch_executor.calibration import PagedLayout

    if engine not in ("servecal", "vllm"):
        raise InputError(f"--engine {engine!r}: expected servecal or vllm")
    vllm_only = (server_python, model_dir, kv_cache_bytes, nice, kv_block_size)
    if engine == "servecal" and vllm_only != (None,) * 5:
        raise InputError(
            "--server-python, --model-dir, --kv-cache-bytes, --kv-block-size and --nice need "
            "--engine vllm"
        )
    cfg = CalibrateConfig(
        out=out,
        device=device,
        model=model,
        budget_s=budget,
        repeats=repeats,
        grid=grid,
        layers=layers,
        dtype=dtype,
        kv_dtype=kv_dtype,
        threads=threads,
        seed=seed,
        block=block,
        resume=resume,
        fit=fit,
        kv_layout=kv_layout,
        tp=tp,
    )
    with Bars() as bars:
        if engine == "vllm":
            from servecal.profiler.vllm_engine import EngineOptions, calibrate_vllm

            opts = EngineOptions(server_python, model_dir, kv_cache_bytes, nice=nice,
                                 kv_block_size=kv_block_size)  # fmt: skip
            result = calibrate_vllm(cfg, opts, on_message=say, on_progress=bars.points())
        else:
            result = run(
                cfg,
                layouts={PagedLayout.name: PagedLayout},
                on_message=say,
                on_progress=bars.points(),
            )
    if result.samples_path is not None:
        from servecal.costmodels.samples import fingerprint_path

        fp = fingerprint_path(result.samples_path)
        typer.echo(f"wrote {result.samples_path} and {fp}")
    if result.outcome.stopped_by == "signal":
        raise typer.Exit(EXIT_INTERRUPTED)
    if result.table_path is None:
        return
    m = result.metrics
    typer.echo(f"wrote {result.table_path}")
    typer.echo(
        f"held-out P50 MAPE {100 * m['p50_mape']:.1f}%  P99 coverage {100 * m['p99_coverage']:.1f}%"
    )
