"""``servecal export``: a cost table for analysis (long form) or for another server."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import typer

from servecal.commands._common import (
    ALLOW_EDITED_HELP,
    output_suffix,
    user_errors,
    writable_file,
)


@user_errors
def export(
    table: Path = typer.Argument(..., help="Cost table (JSON)."),
    fmt: str = typer.Option(
        None,
        "--format",
        help="[default: the --out suffix's, .parquet or .csv] "
        "parquet | csv (long form, one row per grid cell) | vllm-ascend "
        "(profile_table.csv of its dynamic-batch scheduler) | llm-d-sim (latency knobs "
        "of llm-d's inference simulator, fitted by least squares) | MODULE:FUNCTION "
        "(servecal plugins exporter).",
    ),
    out: Path = typer.Option(..., "--out", help="File to write."),
    allow_edited: bool = typer.Option(False, "--allow-edited", help=ALLOW_EDITED_HELP),
    max_num_seqs: int = typer.Option(
        256, "--max-num-seqs", min=1, help="llm-d-sim: concurrency the load factor is fit to."
    ),
    decode_ctx: float | None = typer.Option(
        None,
        "--ctx",
        min=0,
        help="llm-d-sim: fit the decode knobs at this one context (tokens) instead of "
        "over all the table's (the simulator has no context axis).",
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="llm-d-sim: write the file even when a fit's RMS error exceeds 25%.",
    ),
    max_num_batched_tokens: int | None = typer.Option(
        None,
        "--max-num-batched-tokens",
        min=1,
        help="vllm-ascend: write no chunk_size above vLLM's --max-num-batched-tokens.",
    ),
) -> None:
    """Write the table in another format; fitted formats print the fit's error
    (docs/export.md: each consumer, its version, what its format cannot express)."""
    from servecal.costmodels import CostTable
    from servecal.costmodels.export import export_table
    from servecal.util.atomic import atomic_path, is_special

    fmt = export_format(out, fmt)
    writable_file(out)
    loaded = CostTable.load(table, allow_edited=allow_edited or None)
    options = {
        "max_num_seqs": max_num_seqs,
        "source": table.name,
        "max_num_batched_tokens": max_num_batched_tokens,
        "decode_ctx": decode_ctx,
        "force": force,
    }
    if is_special(out):  # /dev/null, a pipe: written in place, no sidecar beside it
        with tempfile.TemporaryDirectory() as folder, atomic_path(out) as tmp:
            staged = Path(folder) / f"export{out.suffix or '.' + fmt}"
            done = export_table(loaded, staged, fmt, **options)
            shutil.copyfile(staged, tmp)
    else:
        done = export_table(loaded, out, fmt, **options)
    typer.echo(f"wrote {done.rows} {done.unit} to {out}")
    for note in done.notes:
        typer.echo(note)


#: The suffix each built-in format is written under (a plug-in exporter's: its own).
SUFFIXES = {"parquet": (".parquet",), "csv": (".csv",), "vllm-ascend": (".csv",),
            "llm-d-sim": (".yaml", ".yml")}  # fmt: skip


def export_format(out: Path, fmt: str | None) -> str:
    """The format: ``--format``, else the suffix's (.parquet or .csv); a built-in format
    under another format's suffix is refused (Parquet bytes in ``x.csv``)."""
    if fmt is None:
        by_suffix = {".parquet": "parquet", ".csv": "csv"}
        fmt = by_suffix.get(out.suffix.lower())
        if fmt is None:
            output_suffix(out, (".parquet", ".csv"), "the long form")
            return "parquet"  # a device or pipe: the long form's default
        return fmt
    if fmt in SUFFIXES:
        output_suffix(out, SUFFIXES[fmt], f"--format {fmt}")
    return fmt


def register(app: typer.Typer) -> None:
    app.command(
        "export",
        help="Export a cost table: long form (Parquet/CSV), vllm-ascend, or llm-d-sim.",
    )(export)
