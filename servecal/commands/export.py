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
        "parquet | csv (long form, one row per grid cell) | dynamo-mocker "
        "(perf_data.npz of NVIDIA Dynamo's mocker, ai-dynamo 1.6.1) | aic-fpm "
        "(fpm_forward_perf.parquet and its .metadata.json: aiconfigurator's whole-forward-"
        "pass table) | llm-d-sim (latency knobs of llm-d's inference simulator v0.10.2, "
        "fitted by least squares) | vllm-ascend (legacy: profile_table.csv of the dynamic-"
        "batch scheduler of vllm-ascend <= 0.23, which later releases removed) | "
        "MODULE:FUNCTION (servecal plugins exporter).",
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
    aic_system: str | None = typer.Option(
        None,
        "--aic-system",
        help="aic-fpm: aiconfigurator's system name [default: from "
        "the table's device, e.g. h100_sxm].",
    ),
    aic_version: str | None = typer.Option(
        None,
        "--aic-version",
        help="aic-fpm: the vLLM version of the data folder [default: the table's engine version].",
    ),
    aic_model_path: str | None = typer.Option(
        None,
        "--aic-model-path",
        help="aic-fpm: the Hugging Face model path aiconfigurator "
        "matches exactly [default: the table's model name].",
    ),
) -> None:
    """Write the table in another format; fitted formats print the fit's error
    (docs/export.md: each consumer, its version, what its format cannot express)."""
    from servecal.costmodels import CostTable
    from servecal.costmodels.export import REQUIRED_SUFFIX, export_table
    from servecal.util.atomic import atomic_path, is_special
    from servecal.util.errors import InputError

    fmt = export_format(out, fmt)
    writable_file(out)
    loaded = CostTable.load(table, allow_edited=allow_edited)
    options = {
        "max_num_seqs": max_num_seqs,
        "source": table.name,
        "max_num_batched_tokens": max_num_batched_tokens,
        "decode_ctx": decode_ctx,
        "force": force,
        "aic_system": aic_system,
        "aic_version": aic_version,
        "aic_model_path": aic_model_path,
    }
    if is_special(out) and fmt == "aic-fpm":
        raise InputError("--out: aic-fpm writes its metadata sidecar beside the file: give a path")
    if is_special(out):  # /dev/null, a pipe: written in place, no sidecar beside it
        with tempfile.TemporaryDirectory() as folder, atomic_path(out) as tmp:
            suffix = REQUIRED_SUFFIX.get(fmt) or out.suffix or "." + fmt
            staged = Path(folder) / f"export{suffix}"
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
        help="Export a cost table: long form (Parquet/CSV), dynamo-mocker, aic-fpm, "
        "llm-d-sim, or vllm-ascend (legacy, <= 0.23).",
    )(export)
