"""aiconfigurator's loader of a ``fpm_forward_perf`` pair, re-implemented from its
source (not a test module; aiconfigurator's compiled core does not install here).

Follows ``load_pair`` and ``validate_sidecar`` of
``aic-core/rust/aiconfigurator-core/src/perf_database/fpm_forward.rs`` at
ai-dynamo/aiconfigurator ``095f58a51c4ca8e61b66ec108d86f223f8d559ce`` (2026-08-21), the
schema of ``docs/fpm/aic-fpm-modeling-plan.md`` §2, and the synthetic pair its own
``tests/unit/sdk/test_fpm_forward.py`` writes: every check that refuses a pair, in
order, then the cells as the loader keys them (the 15 identity columns and
``model_path``) with their prefill ``[batch][total_prefill][total_kv]`` and decode
``[batch][total_kv]`` tables.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

SCHEMA_NAME = "aic_fpm_forward_perf"
SCHEMA_VERSION = 6
COORDINATE_SYSTEM = "iteration_totals_balanced_v1"
MEASUREMENT_POLICY = "dynamo_native_single_sample_v1"
PARTITION_POLICY = "balanced_v1"
CELL_MATCH_COLUMNS = ("gemm_quant_mode", "moe_quant_mode", "fmha_quant_mode", "comm_quant_mode",
                      "kv_cache_dtype", "tp", "pp", "dp", "moe_tp", "moe_ep", "cp",
                      "moe_backend", "attention_backend", "enable_wideep",
                      "enable_eplb")  # fmt: skip
STR_COLUMNS = ("cell_id", "model_path", "system", "backend", "backend_version",
               "weight_quantization", "gemm_quant_mode", "moe_quant_mode", "fmha_quant_mode",
               "comm_quant_mode", "kv_cache_dtype", "moe_backend", "attention_backend",
               "workload_kind", "partition_policy")  # fmt: skip
INT_COLUMNS = ("tp", "pp", "dp", "moe_tp", "moe_ep", "cp", "batch_size", "total_prefill_tokens",
               "total_kv_read_tokens")  # fmt: skip
BOOL_COLUMNS = ("enable_wideep", "enable_eplb")


class Refused(ValueError):
    """The loader's ``AicError::PerfDatabase``."""


def load_pair(folder: Path, system: str, backend: str, version: str) -> dict[tuple, dict]:
    """The cells of ``folder/fpm_forward_perf.parquet`` (its sidecar beside it), as
    aiconfigurator's loader builds them for ``system/backend/version``."""
    import pyarrow.parquet as pq

    parquet = folder / "fpm_forward_perf.parquet"
    sidecar = folder / "fpm_forward_perf.metadata.json"
    if not sidecar.exists():
        raise Refused("missing its metadata sidecar")
    meta = json.loads(sidecar.read_text())
    if not isinstance(meta, dict):
        raise Refused("sidecar must be a JSON object")
    for key, want in (("schema_name", SCHEMA_NAME), ("schema_version", SCHEMA_VERSION),
                      ("coordinate_system", COORDINATE_SYSTEM),
                      ("measurement_policy", MEASUREMENT_POLICY), ("system", system),
                      ("backend", backend), ("backend_version", version)):  # fmt: skip
        if meta.get(key) != want:
            raise Refused(f"sidecar {key}={meta.get(key)!r}, expected {want!r}")
    if meta.get("parquet_sha256") != hashlib.sha256(parquet.read_bytes()).hexdigest():
        raise Refused("parquet digest mismatch")
    table = pq.read_table(parquet)
    schema = table.schema
    for name in STR_COLUMNS:
        if str(schema.field(name).type) not in ("string", "large_string", "null"):
            raise Refused(f"column {name} is not a string column")
    for name in INT_COLUMNS:
        if not str(schema.field(name).type).startswith(("int", "uint")):
            raise Refused(f"column {name} is not an integer column")
    for name in BOOL_COLUMNS:
        if str(schema.field(name).type) != "bool":
            raise Refused(f"{name} must be a boolean")
    if not str(schema.field("latency_ms").type).startswith(("double", "float")):
        raise Refused("latency_ms is not a float column")
    rows = table.to_pylist()
    if meta.get("row_count") != len(rows):
        raise Refused(f"row_count mismatch: sidecar={meta.get('row_count')} actual={len(rows)}")
    if not rows:
        raise Refused("no rows")
    return _cells(rows, system, backend, version)


def _identity(row: dict[str, Any]) -> tuple[str, ...]:
    def norm(name: str) -> str:
        value = row[name]
        if value is None:
            return ""
        return ("True" if value else "False") if isinstance(value, bool) else str(value)

    return tuple(norm(c) for c in CELL_MATCH_COLUMNS)


def _cells(rows: list[dict], system: str, backend: str, version: str) -> dict[tuple, dict]:
    cells: dict[tuple, dict] = {}
    keys: set[tuple] = set()
    coords: set[tuple] = set()
    for i, row in enumerate(rows):
        kind = row["workload_kind"]
        if kind not in ("prefill", "decode"):
            raise Refused(f"row {i} has unknown workload_kind={kind!r}")
        if row["partition_policy"] != PARTITION_POLICY:
            raise Refused(f"row {i} has unsupported partition_policy")
        for key, want in (("backend_version", version), ("system", system), ("backend", backend)):
            if row[key] != want:
                raise Refused(f"row {i} {key}={row[key]!r} does not match {want!r}")
        latency = row["latency_ms"]
        if latency is None or not math.isfinite(latency) or latency <= 0:
            raise Refused(f"row {i} has non-finite/non-positive latency_ms={latency!r}")
        b, tp, kv = row["batch_size"], row["total_prefill_tokens"], row["total_kv_read_tokens"]
        if min(b, tp, kv) < 0 or b < 1:
            raise Refused(f"row {i} has invalid workload coordinates")
        if kind == "prefill" and tp < 1:
            raise Refused(f"row {i} is a prefill point with no prefill tokens")
        if kind == "decode" and tp != 0:
            raise Refused(f"row {i} is a decode point carrying prefill tokens")
        ident = _identity(row)
        if not ident[11] or not ident[12]:
            raise Refused(f"row {i} moe_backend/attention_backend must be non-empty")
        head = (row["cell_id"], row["model_path"], row["system"], row["backend"], version)
        key = (*head, row["weight_quantization"] or "", *ident, kind, b, tp, kv)
        if key in keys:
            raise Refused(f"duplicate physical row key {key}")
        keys.add(key)
        cell_key = (row["model_path"] or "", *ident)
        if (cell_key, kind, b, tp, kv) in coords:
            raise Refused(f"row {i} collides with an earlier row at the same cell coordinates")
        coords.add((cell_key, kind, b, tp, kv))
        cell = cells.setdefault(cell_key, {"prefill": {}, "decode": {}})
        if kind == "prefill":
            cell["prefill"][(b, tp, kv)] = latency
        else:
            cell["decode"][(b, kv)] = latency
    return cells
