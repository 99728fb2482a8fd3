"""Published per-step measurements of eager engines, as measured-steps frames.

Two public sources (copies and their provenance: ``tests/data/eager/README.md``):

* Sarathi-Serve (OSDI'24), A100 80GB PCIe, Yi-34B at TP 2: figure 2's pure-decode
  batches (1-128 requests) and pure prefills (128-16,384 tokens), ``batch_execution_time``
  in seconds, and table 2's mixed batches in ms. The decode context length is not
  published; :data:`SARATHI_DECODE_CTX` is assumed (decode attention is 3 of 68 ms in
  table 2, so the choice moves little). A row with ``Batch Id`` 0 is the engine's first
  batch (no ``inter_batch_delay`` before it: warm-up) and is left out.
* Splitwise (ISCA'24) ``perf_model.csv``: ``token_time`` (ms per decode iteration) of a
  static batch of ``batch_size`` requests after a ``prompt_size`` prompt, over
  ``token_size`` output tokens; one step per configuration (the median of its repeats) at
  context ``prompt_size + token_size / 2`` (the mean KV length over the decode).

Every row names its ``config`` (the whole configuration it measures); :func:`halves`
splits them by configuration, never by row.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from servecal.profiler.importers.csvfile import read_profile_csv
from servecal.util.errors import InputError

SARATHI_DECODE_CTX = 1024
STEP_FRAME = ("set", "config", "n_decode", "chunk", "ctx", "prefix", "ms")


def sarathi_steps(folder: Path) -> pd.DataFrame:
    """Figure 2 (decode, prefill) and table 2 of Sarathi-Serve as steps (ms)."""
    rows = []
    for name, kind in (("figure-2_decode.csv", "decode"), ("figure-2_prefill.csv", "prefill")):
        needed = ("batch_num_decode_tokens", "batch_num_prefill_tokens", "batch_execution_time")
        frame = read_profile_csv(folder / name, (*needed, "Batch Id"))
        frame = frame[frame["Batch Id"] != 0]  # the first batch the engine ran: warm-up
        for r in frame.itertuples(index=False):
            n, c = int(r.batch_num_decode_tokens), int(r.batch_num_prefill_tokens)
            rows.append((f"sarathi-{kind}", f"n={n} c={c}", n, c, r.batch_execution_time * 1e3))
    table = read_profile_csv(
        folder / "table-2_results.csv",
        ("batch_num_decode_tokens", "batch_num_prefill_tokens", "batch_execution_time"),
    )
    for r in table.itertuples(index=False):
        n, c = int(r.batch_num_decode_tokens), int(r.batch_num_prefill_tokens)
        rows.append(("sarathi-table2", f"n={n} c={c}", n, c, float(r.batch_execution_time)))
    out = pd.DataFrame(rows, columns=["set", "config", "n_decode", "chunk", "ms"])
    out["ctx"] = SARATHI_DECODE_CTX
    out["prefix"] = 0
    return out[list(STEP_FRAME)]


def splitwise_steps(path: Path, model: str, hardware: str) -> pd.DataFrame:
    """Splitwise ``token_time`` medians per (TP, prompt, batch, output) configuration."""
    needed = ("model", "hardware", "tensor_parallel", "prompt_size", "batch_size", "token_size")
    frame = read_profile_csv(path, (*needed, "token_time"))
    frame = frame[(frame["model"] == model) & (frame["hardware"] == hardware)]
    if frame.empty:
        raise InputError(f"{path}: no rows for model {model!r} on {hardware!r}")
    keys = ["tensor_parallel", "prompt_size", "batch_size", "token_size"]
    med = frame.groupby(keys)["token_time"].median().reset_index()
    return pd.DataFrame(
        {
            "set": "splitwise-tp" + med["tensor_parallel"].astype(str),
            "config": [
                f"tp={r.tensor_parallel} prompt={r.prompt_size} batch={r.batch_size} "
                f"out={r.token_size}"
                for r in med.itertuples()
            ],
            "n_decode": med["batch_size"].astype(int),
            "chunk": 0,
            "ctx": (med["prompt_size"] + med["token_size"] // 2).astype(int),
            "prefix": 0,
            "ms": med["token_time"].astype(float),
            "tp": med["tensor_parallel"].astype(int),
        }
    )


def halves(steps: pd.DataFrame) -> pd.Series:
    """0/1 per row: within each ``set``, configurations alternate in their sorted order
    (by batch, then chunk, then context), so both halves span each set's range."""
    key = steps["set"] + " " + steps["config"]
    order = steps.assign(key=key).sort_values(["set", "n_decode", "chunk", "ctx"])
    configs = order.drop_duplicates("key")
    rank = configs.groupby("set").cumcount() % 2
    which = dict(zip(configs["key"], rank, strict=True))
    return key.map(which).astype(int)
