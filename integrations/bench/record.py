"""What the bench measured, as a servecal run folder.

``requests.parquet`` holds the client's view, in the engine's columns: arrival is
the time the request was *due* (so a late client is charged, as a simulated
arrival would be), first token and completion are when the client read them,
TPOT statistics come from the gaps between the tokens it read (by the engine's own
function). A request that failed or was cut off has no completion: it counts as
missed. ``iterations.parquet`` holds the steps the server's plug-in logged while
this run was in flight (empty when the bench has no server log), so the same
``report`` draws both, and ``validate`` gates a table on them.

Requests with prefix identity keep it: ``block_ids`` (a list per request) and
``block_size``, so ``simulate --workload trace:RUN`` replays the same shared prefixes.
With a server log that says what vLLM's prefix cache served each request
(``cached_tokens``, joined by the ``X-Request-Id`` the client sent), the rows carry
it too, and the summary its ``prefix_hit_share``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from servecal.integrations.bench.client import Received


def request_columns(received: list[Received], cached: dict[int, int] | None = None
                    ) -> dict[str, np.ndarray]:  # fmt: skip
    """The engine's request columns of what the client saw, plus the requests' prefix
    identity where they carry one and ``cached_tokens`` where ``cached`` (rid → tokens
    vLLM's prefix cache served; NaN for a request the server did not log) is given."""
    from servecal.sched.result import REQUEST_COLUMNS, append_request_row
    from servecal.sched.result import request_columns as typed

    rows: dict[str, list[Any]] = {c: [] for c in REQUEST_COLUMNS}
    for got in received:
        times = np.asarray(got.token_ms, dtype=float)
        append_request_row(
            rows,
            got.request,
            first_ms=float(times[0]) if times.size else math.nan,
            done_ms=float(times[-1]) if got.complete else math.nan,
            tokens_out=int(times.size),
            gaps=np.diff(times),
            recomputes=0,
            parks=0,
            slo_exception=False,
            rejected=False,
        )
    columns = typed(rows)
    reqs = [got.request for got in received]
    if any(r.block_ids for r in reqs):
        ids = np.empty(len(reqs), dtype=object)  # one list per request (lengths differ)
        for k, r in enumerate(reqs):
            ids[k] = [int(b) for b in r.block_ids]
        columns["block_ids"] = ids
        columns["block_size"] = np.array([r.block_size for r in reqs], dtype=np.int64)
    if cached is not None:
        columns["cached_tokens"] = np.array([cached.get(r.rid, np.nan) for r in reqs], dtype=float)
    return columns


def served_cached_tokens(run_dir: Path, id_prefix: str) -> dict[int, int] | None:
    """rid → prompt tokens vLLM's prefix cache served, from a plug-in's run log (its
    ``requests.parquet``'s ``cached_tokens``, the rows named ``id_prefix-RID``); None
    when the log has no such column."""
    from servecal.costmodels.segments import read_table
    from servecal.integrations.bench.client import rid_of
    from servecal.util.errors import InputError

    try:
        frame = read_table(run_dir / "requests.parquet")
    except (OSError, ValueError, InputError):
        return None
    if "cached_tokens" not in frame or "request_id" not in frame:
        return None
    out = {}
    for name, tokens in zip(frame["request_id"], frame["cached_tokens"], strict=True):
        rid = rid_of(str(name), id_prefix)
        if rid is not None and tokens == tokens:  # NaN: a row without it
            out[rid] = int(tokens)
    return out


def _window(run_dir: Path, name: str, column: str, start_unix: float, end_unix: float,
            times: tuple[str, ...] = ()) -> Any:  # fmt: skip
    """The rows of a plug-in's run-log table ``name`` whose ``column`` (server ms) lies
    between two wall-clock times, with it and the other time columns ``times`` moved
    onto the bench's clock (ms after ``start_unix``); None when the folder has no such
    rows yet."""
    from servecal.costmodels.segments import read_table
    from servecal.util.errors import InputError

    try:
        meta = json.loads((run_dir / "run.json").read_text())
        frame = read_table(run_dir / name)
    except (OSError, ValueError, InputError):
        return None
    origin = meta.get("config", {}).get("vllm", {}).get("clock_origin_unix")
    if origin is None:
        return None
    shift = (start_unix - float(origin)) * 1000.0  # server ms → bench ms
    at = frame[column].to_numpy(dtype=float) - shift
    keep = (at >= 0) & (at <= (end_unix - start_unix) * 1000.0)
    out = frame.loc[keep].reset_index(drop=True)
    out[column] = at[keep]
    for other in times:
        out[other] = out[other].to_numpy(dtype=float) - shift
    return out


def server_steps(run_dir: Path, start_unix: float, end_unix: float) -> Any:
    """The steps a plug-in's run log holds between two wall-clock times, with their
    start times moved onto the bench's clock (ms after ``start_unix``); None when
    the folder has no steps yet."""
    return _window(run_dir, "iterations.parquet", "start_ms", start_unix, end_unix)


def server_requests(run_dir: Path, start_unix: float, end_unix: float) -> Any:
    """The requests a plug-in's run log holds (the engine's view: its own arrival,
    first-token and step times) that arrived between two wall-clock times, arrival
    moved onto the bench's clock; None when the folder has none yet. A request the
    engine has not finished is not in the log yet."""
    return _window(run_dir, "requests.parquet", "arrival_ms", start_unix, end_unix,
                   ("first_token_ms", "completion_ms"))  # fmt: skip


def write_bench_run(folder: Path, received: list[Received], iterations: Any,
                    config: dict[str, Any], cached: dict[int, int] | None = None
                    ) -> dict[str, Any]:  # fmt: skip
    """Write the run folder (atomically, as every run) and return its summary
    (``cached``: :func:`served_cached_tokens`)."""
    import pandas as pd

    from servecal.sched.engine import ITERATION_COLUMNS
    from servecal.sched.metrics import summarize
    from servecal.sched.result import RunResult
    from servecal.sched.runfolder import write_run

    requests = pd.DataFrame(request_columns(received, cached))
    if iterations is None:
        iterations = pd.DataFrame({c: np.zeros(0) for c in ITERATION_COLUMNS})
    summary = summarize(requests, iterations)
    errors = [got.error for got in received if got.error]
    summary["errors"] = len(errors)
    result = RunResult.from_frames(requests=requests, iterations=iterations,
                                   plan_calls=len(iterations), energy_source="none")  # fmt: skip
    doc = dict(config)
    doc["first_errors"] = sorted(set(errors))[:5]
    write_run(folder, result, doc, summary, {"seed": config.get("seed")})
    return summary
