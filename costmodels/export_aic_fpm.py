"""A cost table as aiconfigurator's whole-forward-pass table (``fpm_forward_perf``).

Written for aiconfigurator at ``095f58a5`` (2026-08-21): ``docs/fpm/`` describes it,
``collector/fpm_forward/database.py`` writes it and
``aic-core/rust/aiconfigurator-core/src/perf_database/fpm_forward.rs`` loads it (with
``forward_model="fpm"``). It is a pair in
``systems/data/<system>/<backend>/<version>/``:

* ``fpm_forward_perf.parquet``: one row per forward pass, keyed by a cell identity
  (model path, quantisation, parallelism, backend knobs) and the per-DP-rank iteration
  totals ``(workload_kind, batch_size, total_prefill_tokens, total_kv_read_tokens)``,
  with one value, ``latency_ms``;
* ``fpm_forward_perf.metadata.json``: the commit record (``schema_name
  aic_fpm_forward_perf``, ``schema_version 6``, the coordinate system, the measurement
  policy, the identity, ``row_count`` and the Parquet file's ``parquet_sha256``), written
  after the Parquet file, as the collector does.

Rows are pure prefills or pure decodes (aiconfigurator composes a mixed step itself):

* decode: ``batch_size = n`` for every grid ``n_decode ≥ 1``, ``total_prefill_tokens =
  0``, ``total_kv_read_tokens = n · ctx`` for every grid ``ctx ≥ 1``: the table's
  ``P50(n, 0, ctx, 0)``;
* prefill: ``batch_size = B`` in :data:`PREFILL_BATCHES`, ``total_prefill_tokens = T``
  for every grid ``chunk ≥ B``, ``total_kv_read_tokens = B · p`` for every grid
  ``prefix`` ``p``: the table's ``P50(0, T, first ctx, p)``, servecal's price of one
  chunk of ``T`` tokens over prompts with ``p`` cached each (how its own engine prices
  a chunk spanning prompts).

The format has one value per point: no tail. Refused (one ``error:`` line, exit 2,
nothing written): a table without a P50, without ``chunk ≥ 1`` or without
``n_decode ≥ 1`` and ``ctx ≥ 1``, whose P50 is not positive somewhere on those points,
or whose device names no aiconfigurator system and no ``--aic-system`` is given.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from typing import Any

import numpy as np

from servecal.costmodels.export import ExportOptions, Rendered
from servecal.costmodels.export_dynamo import checked, p50, positive_axis
from servecal.costmodels.table import CostTable
from servecal.util.errors import InputError

FMT = "aic-fpm"
#: The loader's file names (``FPM_FORWARD_BASENAME``; the sidecar beside it, named
#: as the Parquet file with this suffix instead of ``.parquet``).
PARQUET_NAME = "fpm_forward_perf.parquet"
SIDECAR_SUFFIX = ".metadata.json"
SIDECAR_NAME = "fpm_forward_perf" + SIDECAR_SUFFIX
#: What the loader pins in the sidecar (``perf_database/fpm_forward.rs``).
SCHEMA = {
    "schema_name": "aic_fpm_forward_perf",
    "schema_version": 6,
    "coordinate_system": "iteration_totals_balanced_v1",
    "measurement_policy": "dynamo_native_single_sample_v1",
}
PARTITION_POLICY = "balanced_v1"
#: Prefill batches written (aiconfigurator clamps a larger batch to the largest when
#: the batch axis is flat at matched totals, which servecal's price is).
PREFILL_BATCHES = (1, 2, 4, 8)
#: aiconfigurator's system names of the GPUs servecal's fingerprints name.
_SYSTEMS = (("h200", "h200_sxm"), ("h100", "h100_sxm"), ("b200", "b200_sxm"),
            ("gb200", "gb200_sxm"), ("a100", "a100_sxm"), ("l40s", "l40s"))  # fmt: skip


def _system(table: CostTable, given: str | None) -> str:
    if given:
        return given
    fp = table.fingerprint
    named = " ".join(str(fp.get(k, "")) for k in ("pointwise_device", "device_name", "device"))
    for key, system in _SYSTEMS:
        if key in named.lower():
            return system
    raise InputError(
        f"--format {FMT}: the table's device ({named.strip() or 'none'}) names no "
        "aiconfigurator system: give --aic-system (e.g. h100_sxm)"
    )


def _version(table: CostTable, given: str | None) -> str:
    fp = table.fingerprint
    version = given or fp.get("engine_version")
    if not version:  # an imported aiconfigurator profile names its vLLM version
        found = re.search(r"vllm_?(\d+\.\d+(?:\.\d+)?)", str(fp.get("profile_path", "")))
        version = found and (found.group(1) + (".0" if found.group(1).count(".") == 1 else ""))
    if not version:
        raise InputError(f"--format {FMT}: the table names no vLLM version: give --aic-version")
    return str(version)


def identity(table: CostTable, options: ExportOptions) -> dict[str, Any]:
    """The cell identity every row carries (a dense model at aiconfigurator's defaults,
    as its own test of the format writes one)."""
    fp = table.fingerprint
    dtype = str(fp.get("dtype") or "bfloat16")
    return {
        "model_path": options.aic_model_path or str(fp.get("model") or "unknown"),
        "system": _system(table, options.aic_system),
        "backend": "vllm",  # the collector as built measures vLLM only
        "backend_version": _version(table, options.aic_version),
        "weight_quantization": dtype,
        "gemm_quant_mode": dtype,
        "moe_quant_mode": None,
        "fmha_quant_mode": None,
        "comm_quant_mode": "half",
        "kv_cache_dtype": dtype,
        "tp": int(table.tp),
        "pp": 1,
        "dp": 1,
        "moe_tp": 1,
        "moe_ep": 1,
        "cp": 1,
        "moe_backend": "auto",
        "attention_backend": "auto",
        "enable_wideep": False,
        "enable_eplb": False,
    }


def fpm_rows(table: CostTable) -> list[tuple[str, int, int, int, float]]:
    """``(workload_kind, batch_size, total_prefill_tokens, total_kv_read_tokens,
    latency_ms)`` of every row, decodes then prefills."""
    p50(table, FMT)
    batches = positive_axis(table, "n_decode", FMT, "the decode rows")
    contexts = positive_axis(table, "ctx", FMT, "the decode rows")
    chunks = positive_axis(table, "chunk", FMT, "the prefill rows")
    n, ctx = (g.reshape(-1) for g in np.meshgrid(batches, contexts, indexing="ij"))
    decode, _ = table.lookup(0.5, n, 0, ctx, 0)
    decode = checked(np.asarray(decode, dtype=float), FMT, "decode")
    rows = [
        ("decode", int(b), 0, int(b * c), float(v)) for b, c, v in zip(n, ctx, decode, strict=True)
    ]
    prefixes = np.asarray(table.axes["prefix"], dtype=float)
    ctx0 = float(table.axes["ctx"][0])
    t, p = (g.reshape(-1) for g in np.meshgrid(chunks, prefixes, indexing="ij"))
    prefill, _ = table.lookup(0.5, 0, t, ctx0, p)
    prefill = checked(np.asarray(prefill, dtype=float), FMT, "prefill")
    for b in PREFILL_BATCHES:
        rows += [("prefill", b, int(tt), int(b * pp), float(v))
                 for tt, pp, v in zip(t, p, prefill, strict=True) if tt >= b]  # fmt: skip
    return rows


def render(table: CostTable, options: ExportOptions) -> Rendered:
    """The Parquet file's bytes, and its sidecar as an extra file beside it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = fpm_rows(table)  # the grid's refusals come first
    ident = identity(table, options)
    cell = f"servecal-{table.content_hash().split(':')[-1][:12]}"
    records = [
        {
            "cell_id": cell,
            **ident,
            "workload_kind": kind,
            "batch_size": b,
            "total_prefill_tokens": tp,
            "total_kv_read_tokens": kv,
            "partition_policy": PARTITION_POLICY,
            "latency_ms": ms,
        }  # fmt: skip
        for kind, b, tp, kv, ms in rows
    ]
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(records), buffer)
    data = buffer.getvalue()
    sidecar = {
        **SCHEMA,
        "warmup_repeats": 0,
        "measurement_repeats": 1,
        "row_count": len(records),
        "parquet_sha256": hashlib.sha256(data).hexdigest(),
        "system": ident["system"],
        "backend": ident["backend"],
        "backend_version": ident["backend_version"],
        "model_paths": [ident["model_path"]],
        "producer": "servecal export --format aic-fpm (the table's P50)",
        "servecal_table_content_hash": table.content_hash(),
    }
    side = (json.dumps(sidecar, indent=2, sort_keys=True) + "\n").encode()
    where = f"systems/data/{ident['system']}/vllm/{ident['backend_version']}/"
    notes = (
        f"identity: model_path {ident['model_path']!r} (aiconfigurator matches it exactly: "
        f"--aic-model-path), system {ident['system']}, vLLM {ident['backend_version']}",
        f"aiconfigurator reads {PARQUET_NAME} and {SIDECAR_NAME} together from {where}",
    )
    return Rendered(data, len(records), notes, "rows", extras=((SIDECAR_SUFFIX, side),))
