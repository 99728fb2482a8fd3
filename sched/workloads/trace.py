"""Replay a request trace: Azure LLM format or a plain lengths CSV.

Accepted columns (first match wins):

* Azure LLM inference trace: ``TIMESTAMP, ContextTokens, GeneratedTokens``;
* plain: ``prompt_tokens, output_tokens[, arrival_s]``;
* a servecal run folder (its ``requests.parquet``: ``prompt_tokens, output_tokens,
  arrival_ms``), e.g. a ``servecal bench`` run on a real server, to simulate the
  same arrivals (with the prefix identity it carries, ``block_ids`` and
  ``block_size``, when it has them);
* Vidur's processed traces: ``num_prefill_tokens, num_decode_tokens`` (lengths only);
* Mooncake's JSONL traces (``.jsonl``): one object a line with ``timestamp`` (ms),
  ``input_length``, ``output_length`` and ``hash_ids``, the prompt's 512-token KV
  blocks as ids: the requests carry them as their prefix identity
  (:attr:`Request.block_ids`, docs/prefix_cache.md).

Arrivals start at 0 ms. With a target ``rate`` every inter-arrival gap is scaled by
the same factor, so the trace's burst structure is kept and only its mean rate
changes; a file without arrival times gets Poisson arrivals at ``rate``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from servecal.sched.request import Request
from servecal.sched.workloads.arrivals import PoissonArrivals
from servecal.sched.workloads.build import build_requests, clip_to_context
from servecal.sched.workloads.classes import SloClass, draw_classes, stamp_slos
from servecal.sched.workloads.spec import CONTEXT_LIMIT, DEFAULT_TTFT, slo_classes_named
from servecal.util.arrow_numpy import read_parquet, to_numpy
from servecal.util.errors import InputError

# (prompt column, output column, arrival column or None, arrival kind)
_FORMATS = (
    ("ContextTokens", "GeneratedTokens", "TIMESTAMP", "datetime"),
    ("prompt_tokens", "output_tokens", "arrival_ms", "ms"),  # a run folder's requests
    ("prompt_tokens", "output_tokens", "arrival_s", "seconds"),
    ("num_prefill_tokens", "num_decode_tokens", None, None),
    ("input_length", "output_length", "timestamp", "ms"),  # Mooncake JSONL
)

#: Tokens per ``hash_ids`` block in Mooncake's traces.
MOONCAKE_BLOCK_SIZE = 512


def _read_jsonl(path: Path) -> Any:
    """A Mooncake JSONL trace as a table (``hash_ids`` a list column)."""
    import json

    import pyarrow as pa

    rows = []
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                rows.append(
                    {
                        "timestamp": row["timestamp"],
                        "input_length": row["input_length"],
                        "output_length": row["output_length"],
                        "hash_ids": [int(b) for b in row.get("hash_ids", [])],
                    }
                )
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise InputError(
                    f"{path}: line {line_no}: not a Mooncake trace row ({exc})"
                ) from None
    try:
        return pa.Table.from_pylist(rows) if rows else pa.table({"input_length": []})
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise InputError(f"{path}: cannot read as a trace ({exc})") from None


def _read_table(path: Path) -> Any:
    """The file as a pyarrow table (read and converted without pandas, see
    :mod:`servecal.util.arrow_numpy`; pyarrow's CSV reader also parses the
    Azure timestamps)."""
    import pyarrow.csv

    if path.is_dir() and (path / "requests.parquet").exists():  # a run folder
        path = path / "requests.parquet"
    if path.is_dir() and path.suffix == ".parquet":  # a folder of parts (segments)
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path)
        except Exception as exc:  # noqa: BLE001 - the folder's fault: one line
            raise InputError(f"{path}: cannot read as a trace ({exc})") from None
    if not path.is_file():
        raise InputError(f"{path}: trace file not found")
    if path.suffix == ".jsonl":
        return _read_jsonl(path)
    try:
        if path.suffix == ".parquet":
            return read_parquet(path)
        return pyarrow.csv.read_csv(path)
    except Exception as exc:  # any parser failure is the file's fault: one line
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{path}: cannot read as a trace ({detail})") from None


def _numbers(column: Any) -> np.ndarray:
    """A column as floats; NaN where a value is missing or not a number."""
    import pyarrow as pa

    if pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
        return to_numpy(column).astype(float)
    return np.array([_number(v) for v in column.to_pylist()], dtype=float)


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan


#: Longest prompt or output a trace may give (tokens): beyond it a length is an error,
#: not a number that int64 would wrap round.
MAX_TRACE_TOKENS = 10**9


def _lengths(table: Any, column: str, path: Path) -> np.ndarray:
    values = _numbers(table.column(column))
    with np.errstate(invalid="ignore"):
        bad = np.isnan(values) | (values < 1) | (values > MAX_TRACE_TOKENS)
        bad |= values != np.floor(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError(
            f"{path}: column {column}, line {row + 2}: expected a whole number in "
            f"[1, {MAX_TRACE_TOKENS:.0e}], got {table.column(column)[row].as_py()!r}"
        )
    return values.astype(np.int64)


def _timestamps_s(column: Any) -> np.ndarray:
    """Seconds since the earliest time; NaN where not a time. A column pyarrow read
    as timestamps (none missing) is converted here; anything else goes through
    pandas' parser, which reads more formats."""
    import pyarrow as pa

    if pa.types.is_timestamp(column.type) and column.null_count == 0:
        per_second = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[column.type.unit]
        ticks = to_numpy(column)  # whole ticks (int64): exact differences
        return (ticks - ticks.min()) / per_second if ticks.size else ticks.astype(float)
    import pandas as pd

    parsed = pd.to_datetime(pd.Series(column.to_pylist(), dtype=object), errors="coerce")
    return (parsed - parsed.min()).dt.total_seconds().to_numpy(dtype=float)


def _arrival_seconds(table: Any, column: str, kind: str, path: Path) -> np.ndarray:
    values = table.column(column)
    seconds = _timestamps_s(values) if kind == "datetime" else _numbers(values)
    if kind == "ms":
        seconds = seconds / 1000.0
    bad = ~np.isfinite(seconds)
    with np.errstate(invalid="ignore"):
        bad |= seconds < 0
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError(
            f"{path}: column {column}, line {row + 2}: not a valid arrival time: "
            f"{values[row].as_py()!r}"
        )
    return seconds


def _rescale(arrival_s: np.ndarray, rate: float | None, path: Path) -> np.ndarray:
    """ms from the first arrival; gaps scaled so the mean rate is ``rate`` when given."""
    rel_ms = (arrival_s - arrival_s[0]) * 1000.0
    if rate is None or rel_ms.size < 2:
        return rel_ms
    span = rel_ms[-1]
    if span <= 0:
        raise InputError(f"{path}: all arrivals share one time; cannot rescale to a rate")
    mean_gap_ms = span / (rel_ms.size - 1)
    return rel_ms * ((1000.0 / rate) / mean_gap_ms)


def _check_request_args(
    rate: float | None, tpot_slo_ms: float, ttft_slo_ms: float | None, n_requests: int | None
) -> None:
    """A positive rate and SLOs, and at least one request, when given."""
    if rate is not None and not rate > 0:
        raise InputError(f"rate must be > 0 req/s, got {rate}")
    if not tpot_slo_ms > 0 or (ttft_slo_ms is not None and not ttft_slo_ms > 0):
        raise InputError(f"SLOs must be > 0 ms, got TPOT {tpot_slo_ms}, TTFT {ttft_slo_ms}")
    if n_requests is not None and n_requests < 1:
        raise InputError(f"n_requests must be >= 1, got {n_requests}")


def _trace_format(table: Any, path: Path) -> tuple[str, str, str | None, str]:
    """The first of :data:`_FORMATS` whose columns the table has (prompt, output,
    arrival, arrival kind); a table of no known format or no rows is refused."""
    names = table.column_names
    fmt = next(
        (
            f
            for f in _FORMATS
            if f[0] in names and f[1] in names and (f[3] != "ms" or f[2] in names)
        ),
        None,
    )
    if fmt is None:
        found = ",".join(map(str, names))
        raise InputError(
            f"{path}: no known trace columns (want TIMESTAMP,ContextTokens,GeneratedTokens "
            f"or prompt_tokens,output_tokens[,arrival_s]); found {found}"
        )
    if table.num_rows == 0:
        raise InputError(f"{path}: trace has no rows")
    return fmt


def _slos(
    prompt: np.ndarray,
    tpot_slo_ms: float,
    ttft_slo_ms: float | None,
    slo_classes: tuple[SloClass, ...] | None,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each request's TTFT and TPOT SLOs and class name: drawn classes', or the given
    targets (TTFT by the default rule when not given) under the name ``trace``."""
    n = prompt.size
    if slo_classes:
        which = draw_classes(slo_classes, n, rng)
        return stamp_slos(slo_classes, which, prompt, tpot_slo_ms)
    rule_ttft = DEFAULT_TTFT.slo_ms(prompt)
    ttft = rule_ttft if ttft_slo_ms is None else np.full(n, float(ttft_slo_ms))
    return ttft, np.full(n, float(tpot_slo_ms)), np.full(n, "trace", dtype=object)


def load_trace(
    path: str | Path,
    rate: float | None,
    tpot_slo_ms: float,
    ttft_slo_ms: float | None,
    rng: np.random.Generator,
    n_requests: int | None = None,
    *,
    duration_s: float | None = None,
    slo_classes: str | tuple[SloClass, ...] | None = None,
    context_limit: int = CONTEXT_LIMIT,
) -> list[Request]:
    """Requests of a trace file (formats in the module docstring), sorted by arrival.

    ``n_requests`` keeps the first rows in arrival order (a contiguous window, so
    bursts survive); ``duration_s`` drops arrivals after it (after rescaling).
    ``ttft_slo_ms=None`` applies the default rule ``500 ms + 0.5 ms/prompt token``.
    ``slo_classes`` (a tuple, or a workload name such as ``multislo``) stamps a class
    on each request, drawn by share with ``rng``, that brings its own TTFT rule and
    TPOT SLO (``tpot_slo_ms`` fills classes without one); the trace's lengths are kept.
    Prompt + output is clipped to ``context_limit`` (not a Mooncake trace's: its
    long-context prompts are kept whole, or their blocks would be cut). Bad files
    raise :class:`InputError`.
    """
    path = Path(path)
    if isinstance(slo_classes, str):
        slo_classes = slo_classes_named(slo_classes)
    _check_request_args(rate, tpot_slo_ms, ttft_slo_ms, n_requests)
    table = _read_table(path)
    prompt_col, output_col, arrival_col, kind = _trace_format(table, path)
    prompt = _lengths(table, prompt_col, path)
    output = _lengths(table, output_col, path)
    if arrival_col is not None and arrival_col in table.column_names:
        arrival_s = _arrival_seconds(table, arrival_col, kind, path)
        order = np.argsort(arrival_s, kind="stable")[:n_requests]
        arrival_ms = _rescale(arrival_s[order], rate, path)
    else:
        if rate is None:
            raise InputError(f"{path}: trace has no arrival times; give a rate")
        order = np.arange(table.num_rows)[:n_requests]
        arrival_ms = PoissonArrivals().times_ms(rate, rng, n_requests=order.size)
    if prompt_col == "input_length":  # Mooncake: long-context prompts, kept whole
        context_limit = max(context_limit, int((prompt + output).max()))
    prompt, output = clip_to_context(prompt[order], output[order], context_limit)

    blocks = _block_ids(table, order)
    block_size = _block_size(table, path)
    if duration_s is not None:
        keep = arrival_ms <= duration_s * 1000.0
        arrival_ms, prompt, output = arrival_ms[keep], prompt[keep], output[keep]
        if blocks is not None:
            blocks = [b for b, k in zip(blocks, keep, strict=True) if k]
        if arrival_ms.size == 0:
            raise InputError(f"{path}: no arrivals within the first {duration_s} s")
    ttft, tpot, names = _slos(prompt, tpot_slo_ms, ttft_slo_ms, slo_classes, rng)
    requests = build_requests(arrival_ms, prompt, output, ttft, tpot, names)
    if blocks is None:
        return requests
    return with_block_ids(requests, blocks, block_size)


def _block_ids(table: Any, order: np.ndarray) -> list[list[int]] | None:
    """Each kept row's block ids (in ``order``): a Mooncake trace's ``hash_ids``, a run
    folder's ``block_ids``; None for a trace without them."""
    name = next((c for c in ("hash_ids", "block_ids") if c in table.column_names), None)
    if name is None:
        return None
    ids = table.column(name).to_pylist()
    return [ids[i] or [] for i in order]


def _block_size(table: Any, path: Path) -> int:
    """Tokens per block: a run folder's ``block_size`` (one for the run), else Mooncake's."""
    if "block_size" not in table.column_names:
        return MOONCAKE_BLOCK_SIZE
    sizes = {v for v in table.column("block_size").to_pylist() if v is not None}
    if len(sizes) != 1 or not all(isinstance(v, int) and v >= 1 for v in sizes):
        raise InputError(f"{path}: column block_size: expected one whole number >= 1 for "
                         f"every request, got {sorted(sizes, key=str)[:5]}")  # fmt: skip
    return int(sizes.pop())


def with_block_ids(
    requests: list[Request], blocks: list[list[int]], block_size: int
) -> list[Request]:
    """``requests`` carrying prefix identity: each request's ids, cut to the blocks its
    (possibly clipped) prompt still covers."""
    out = []
    for req, ids in zip(requests, blocks, strict=True):
        covered = -(-req.prompt_tokens // block_size)
        out.append(replace(req, block_ids=tuple(ids[:covered]), block_size=block_size))
    return out
