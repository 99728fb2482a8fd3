"""``servecal import``: samples composed from a public per-operator GPU profile."""

from __future__ import annotations

from pathlib import Path

import typer

from servecal.commands._common import user_errors, writable_file
from servecal.profiler.importer_registry import IMPORTERS

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
    out: Path = typer.Option(Path("samples.parquet"), help="Samples file to write."),
    grid: str = typer.Option(None, help="JSON/TOML grid file (default: the GPU grid)."),
    comm_backend: str = typer.Option(
        "auto",
        help="aiconfigurator all-reduce backend: auto (CUDA graph for decode-only "
        "iterations, eager when the iteration prefills, as vLLM runs them), graph or eager.",
    ),
    no_comm: bool = typer.Option(
        False, "--no-comm", help="Price the tensor-parallel all-reduces at 0 (no table needed)."
    ),
) -> None:
    """Import: compose per-operator medians into iteration samples (rep 0, P50 only)."""
    from servecal.costmodels.samples import write_samples
    from servecal.profiler.design import Grid
    from servecal.profiler.importers import import_profile as run
    from servecal.profiler.importers.collective import CommOptions
    from servecal.profiler.shapes import ModelShape

    writable_file(out)
    shape = ModelShape.resolve(model)
    comm = CommOptions(backend=comm_backend, enabled=not no_comm)
    frame, provenance = run(kind, path, shape, tp, Grid.from_file(grid) if grid else None, comm)
    write_samples(frame, out, provenance)
    typer.echo(
        f"wrote {out}: {len(frame)} rows ({shape.name}, TP {tp}, {kind}; medians, rep 0; "
        f"{provenance['extrapolated_reads']} reads beyond the profiled sizes)"
    )
    if tp > 1:
        table = provenance["collective_table"] or "none"
        typer.echo(f"all-reduces: {table} ({provenance['collective_backend']})")
