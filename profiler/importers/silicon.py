"""Decode steps of a CUDA-graph engine from aiconfigurator's silicon measurements.

aiconfigurator (ai-dynamo/aiconfigurator) keeps the end-to-end runs it checks its own
predictions against in ``systems/silicon_sample.csv``: one row per served configuration
(backend and version, model, GPU, TP, ``isl``, ``osl``, ``batch_size`` = the benchmark's
concurrency) with the measured mean TTFT and TPOT (ms). A copy of the vLLM 0.12 (V1,
CUDA graphs) Qwen3-32B H100 rows, and its provenance, is in ``tests/data/modern/``.

A row's TPOT is the mean step time over a request's decode, at ``batch_size`` requests
and a KV length that grows from ``isl`` to ``isl + osl``: one decode step at the mean
context ``isl + osl/2`` (decode attention is linear in the KV length). It is not a pure
decode step: in an aggregated run new requests' prefills share steps with the decodes,
and their share falls as ``1/osl`` (each request brings ``isl`` prompt tokens per ``osl``
decode steps). So only the longest outputs are used, and of them the rows whose TPOT
barely moves when ``osl`` halves are called *decode-dominated*:
``tpot(osl/2) / tpot(osl) - 1 <= max_interference`` bounds what the prefills add at
``osl`` (the shorter run's extra prefill share is twice the longer's, so the difference
is about that share; it slightly understates it, since the shorter run's mean context is
smaller).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from servecal.profiler.design import Point
from servecal.profiler.importers.compose import compose_row
from servecal.profiler.importers.csvfile import read_profile_csv
from servecal.profiler.shapes import ModelShape
from servecal.util.errors import InputError

SILICON_COLUMNS = ("backend", "backend_version", "model_path", "system", "mode")
MEASURED = ("isl", "osl", "batch_size", "tp_size", "silicon_ttft_ms", "silicon_tpot_ms")
#: Largest share of a TPOT that prefill interference may have (bounded from the
#: measurements, see the module docstring) for a row to count as a decode step.
MAX_INTERFERENCE = 0.05


def silicon_decode_steps(
    path: Path, osl: int = 1024, max_interference: float = MAX_INTERFERENCE
) -> pd.DataFrame:
    """The ``osl`` rows of one engine's silicon CSV as decode steps (ms), each with its
    measured interference bound and whether it is decode-dominated."""
    frame = read_profile_csv(path, (*SILICON_COLUMNS, *MEASURED))
    if frame[list(SILICON_COLUMNS)].drop_duplicates().shape[0] != 1:
        raise InputError(f"{path}: expected the rows of one backend, model and system")
    frame = frame[frame["mode"] == "agg"]
    keys = ["isl", "batch_size", "tp_size"]
    long = frame[frame["osl"] == osl]
    half = frame[frame["osl"] == osl // 2][[*keys, "silicon_tpot_ms"]]
    if long.empty or half.empty:
        raise InputError(f"{path}: needs aggregated rows at osl {osl} and {osl // 2}")
    both = long.merge(half, on=keys, suffixes=("", "_half"), how="left")
    both[keys] = both[keys].astype(int)  # the CSV writes batch and TP sizes as floats
    interference = both["silicon_tpot_ms_half"] / both["silicon_tpot_ms"] - 1
    steps = pd.DataFrame(
        {
            "set": [f"isl {i}" for i in both["isl"]],
            "config": [f"isl={r.isl} c={r.batch_size} tp={r.tp_size}" for r in both.itertuples()],
            "n_decode": both["batch_size"],
            "chunk": 0,
            "ctx": (both["isl"] + osl // 2).astype(int),
            "prefix": 0,
            "ms": both["silicon_tpot_ms"].astype(float),
            "tp": both["tp_size"],
            "ttft_ms": both["silicon_ttft_ms"].astype(float),
            "interference": interference,
            "decode_dominated": interference <= max_interference,  # NaN (no half run): False
        }
    )
    return steps.sort_values(["tp", "ctx", "n_decode"]).reset_index(drop=True)


#: Mixed steps are read from runs whose TPOT the prefills raise by at least this share
#: between the long and the short output (below it the difference is noise, divided up).
MIN_MIXED_SHARE = 0.10
#: ... and whose TTFT moves by at most this factor between them (beyond: the KV cache ran
#: out and requests queued, which no step model describes).
MAX_TTFT_MOVE = 1.25


def silicon_mixed_steps(
    path: Path,
    short: int = 128,
    long: int = 1024,
    min_share: float = MIN_MIXED_SHARE,
) -> pd.DataFrame:
    """Mixed steps (``batch_size - 1`` decodes + one ``isl`` prompt) read from two runs
    of the same configuration that differ only in output length.

    With concurrency ``B`` each request brings one ``isl``-token prefill per ``osl``
    steps, so a step's mean is ``TPOT(osl) = D + (B/osl)·X`` (``D``: the decode step,
    ``X``: what adding one prompt to it costs). Two output lengths give ``X =
    (TPOT(short) - TPOT(long)) / (B·(1/short - 1/long))`` and the mixed step ``M = D + X
    = TPOT(short) + (1 - B/short)·X``, at the short run's mean context ``isl + short/2``.
    The decode step is taken as the same in both runs (the long run's is longer by its
    larger context: this understates ``X`` slightly). Kept: configurations whose
    ``TPOT(short)/TPOT(long) - 1 >= min_share`` and whose TTFT moves by at most
    :data:`MAX_TTFT_MOVE` between the two (the KV cache held)."""
    frame = read_profile_csv(path, (*SILICON_COLUMNS, *MEASURED))
    frame = frame[frame["mode"] == "agg"]
    keys = ["isl", "batch_size", "tp_size"]
    a = frame[frame["osl"] == short].merge(
        frame[frame["osl"] == long], on=keys, suffixes=("_s", "_l")
    )
    if a.empty:
        raise InputError(f"{path}: needs aggregated rows at osl {short} and {long}")
    a[keys] = a[keys].astype(int)
    b = a["batch_size"].to_numpy(float)
    t_s, t_l = a["silicon_tpot_ms_s"].to_numpy(float), a["silicon_tpot_ms_l"].to_numpy(float)
    added = (t_s - t_l) / (b * (1 / short - 1 / long))
    move = a["silicon_ttft_ms_l"] / a["silicon_ttft_ms_s"]
    keep = (t_s / t_l - 1 >= min_share) & (move <= MAX_TTFT_MOVE) & (move >= 1 / MAX_TTFT_MOVE)
    steps = pd.DataFrame(
        {
            "set": [f"isl {i}" for i in a["isl"]],
            "config": [f"isl={r.isl} c={r.batch_size} tp={r.tp_size}" for r in a.itertuples()],
            "n_decode": a["batch_size"] - 1,
            "chunk": a["isl"],
            "ctx": a["isl"] + short // 2,
            "prefix": 0,
            "ms": t_s + (1 - b / short) * added,
            "prompt_ms": added,  # X: what one prompt adds to a step
            "tp": a["tp_size"],
            "share": t_s / t_l - 1,
            "ttft_move": move,
        }
    )[keep.to_numpy()]
    return steps.sort_values(["tp", "chunk", "n_decode"]).reset_index(drop=True)


#: H100 SXM dense bf16 tensor-core peak (NVIDIA's datasheet, without sparsity), TFLOP/s.
H100_SXM_BF16_TFLOPS = 989.4


def prompt_compute_floor_ms(shape: ModelShape, tokens: Any, tp: Any, tflops: float) -> np.ndarray:
    """The least time a prompt of ``tokens`` can take on ``tp`` GPUs of ``tflops`` peak:
    its linear layers' multiply-adds (2 FLOPs per weight per token) at the peak rate,
    attention and everything else free. A prompt cost ``X`` read from measurements
    below it is not a prompt's cost (the runs did not interleave prompts and decodes as
    :func:`silicon_mixed_steps` assumes)."""
    q, kv, h = shape.q_dim, shape.kv_dim, shape.hidden
    weights = shape.n_layers * (h * (q + 2 * kv) + q * h + 3 * h * shape.intermediate)
    flops = 2.0 * weights * np.asarray(tokens, dtype=float) / np.asarray(tp, dtype=float)
    return flops / (tflops * 1e12) * 1e3


def composed_decode_ms(
    sources: dict[int, Any], shape: ModelShape, steps: pd.DataFrame
) -> np.ndarray:
    """``[steps, 2]``: each step's composed time and its pointwise part (``op_other_ms``),
    from ``sources[tp]`` (an importer source per TP degree)."""
    out = []
    for r in steps.itertuples(index=False):
        row = compose_row(sources[int(r.tp)], shape, Point(int(r.n_decode), 0, int(r.ctx), 0))
        out.append((row["ms"], row["op_other_ms"]))
    return np.array(out)


def error_and_bias(predicted: Any, measured: Any) -> tuple[float, float]:
    """Median ``|predicted/measured - 1|`` and median ``predicted/measured``."""
    ratio = np.asarray(predicted, dtype=float) / np.asarray(measured, dtype=float)
    return float(np.median(np.abs(ratio - 1))), float(np.median(ratio))
