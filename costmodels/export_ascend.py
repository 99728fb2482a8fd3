"""A cost table as vllm-ascend's dynamic-batch profile table (``profile_table.csv``).

The reader is ``BudgetRefiner`` in ``vllm_ascend/core/scheduler_dynamic_batch.py`` of
vllm-ascend **v0.23.0** (the last release that has it: PR #11933 removed it upstream in
July 2026; it ran on the 910B3 NPU only). Enabled with ``--additional-config
'{"SLO_limits_for_dynamic_batch": T}'``, it reads ``vllm_ascend/core/profile_table.csv``,
columns ``chunk_size, p_len, d_num, ctx_len, cost`` (``cost`` in ms), and keeps, per
``(ctx_len, d_num)``, the largest ``chunk_size`` whose ``cost <= T``: the step's token
budget. It looks a running batch up at the first ``ctx_len`` and ``d_num`` keys at or
above its own *in the iteration order of a Python set*, and a pair without a row under
``T`` falls back to ``max_num_batched_tokens``, the largest budget of all.

So the file is written for those rules, not for a reader that searches sorted keys:

* ``d_num`` is dense, every integer from 1 to the table's largest ``n_decode``: a set of
  small integers iterates in sorted order, so a batch is looked up at its own ``d_num``;
* ``cost`` is rounded *up* to 0.1 µs, and a cost table never falls along ``ctx``
  (:class:`CostTable` refuses one that does), so whichever key at or above the batch's
  context the set order yields, the budget is no larger than the table allows at the
  batch's own context;
* every ``(ctx_len, d_num)`` has a floor row ``p_len 0, cost 0``: not a measurement, it
  makes the budget ``d_num`` (the decodes, no prefill) when even the decodes alone
  exceed ``T``, where the reader would otherwise take ``max_num_batched_tokens``.

``cost`` is the table's planning bound ``P99 + δ`` (its P50 when the table has no
margin, with a note), so ``T`` is a TPOT SLO; ``p_len`` runs over the chunk grid and
every 16 tokens up to 1024, then 32 per octave (the budget is rounded down to a written
``p_len``: at most 16 tokens or 1/32 short), with no cached prefix.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from servecal.costmodels.export import ExportOptions, Rendered
from servecal.costmodels.table import CostTable
from servecal.util.errors import InputError

#: Column order of vllm-ascend's file.
COLUMNS = ("chunk_size", "p_len", "d_num", "ctx_len", "cost")
#: Spacing of the prefill lengths up to :data:`FINE_UP_TO` tokens.
P_LEN_STEP = 16
FINE_UP_TO = 1024
#: Prefill lengths per doubling above :data:`FINE_UP_TO`.
PER_OCTAVE = 32
#: Decimals of the written cost (ms): 4, i.e. 0.1 µs, rounded up.
COST_DECIMALS = 4


def prefill_lengths(chunks: tuple[int, ...] | list[int], top: int | None = None) -> np.ndarray:
    """0, the chunk grid's values and every :data:`P_LEN_STEP` tokens up to
    :data:`FINE_UP_TO`, then :data:`PER_OCTAVE` per doubling, up to ``top`` (default: the
    grid's last chunk)."""
    top = int(chunks[-1]) if top is None else int(top)
    parts = [np.asarray(chunks, dtype=np.int64), np.arange(0, FINE_UP_TO + 1, P_LEN_STEP)]
    lo = FINE_UP_TO
    while lo < top:
        parts.append(np.arange(lo, 2 * lo + 1, lo // PER_OCTAVE))
        lo *= 2
    grid = np.unique(np.concatenate(parts))
    return grid[grid <= top].astype(np.int64)


def ceil_decimals(values: np.ndarray, decimals: int = COST_DECIMALS) -> np.ndarray:
    """``values`` rounded up to ``decimals``: each result, printed with that many decimals
    and read back, is >= the value it stands for."""
    scale = 10.0**decimals
    k = np.ceil(values * scale)
    k = np.where(k / scale < values, k + 1, k)  # the product itself rounded down
    return k / scale


def ascend_cost_grid(
    table: CostTable, dnum: np.ndarray, plen: np.ndarray
) -> tuple[np.ndarray, str]:
    """The written cost, shape ``(ctx, d_num, p_len)``: the bound (or P50) rounded up;
    and a note on what it is."""
    ctx = np.asarray(table.axes["ctx"], dtype=np.int64)
    c, d, p = np.meshgrid(ctx, dnum, plen, indexing="ij")
    if table.margin_info is not None:
        cost = table.lookup_bound(d.ravel(), p.ravel(), c.ravel(), 0)
        note = f"cost = P{table.tail * 100:g} + margin (ms): set the SLO limit to a TPOT SLO"
    else:
        cost, _ = table.lookup(0.5, d.ravel(), p.ravel(), c.ravel(), 0)
        note = "cost = P50 (ms): the table has no calibrated margin, so no tail bound"
    return ceil_decimals(np.asarray(cost, dtype=float).reshape(c.shape)), note


def ascend_profile(
    table: CostTable, max_num_batched_tokens: int | None = None
) -> tuple[pd.DataFrame, list[str]]:
    """The profile table's rows, ordered by ``ctx_len, d_num, p_len`` (each pair's floor
    row first), and notes. ``max_num_batched_tokens`` (vLLM's flag of that name) caps
    ``chunk_size``: the reader hands its budget to vLLM unchecked."""
    axes = table.axes
    top_n = int(axes["n_decode"][-1])
    cap = max_num_batched_tokens
    if cap is not None and cap < 1:
        raise InputError("--max-num-batched-tokens must be >= 1")
    d_top = top_n if cap is None else min(top_n, cap)
    if d_top < 1:
        raise InputError(
            "cannot write a vllm-ascend profile table: the table's n_decode axis "
            f"{list(axes['n_decode'])} has no batch with decodes"
        )
    dnum = np.arange(1, d_top + 1, dtype=np.int64)
    plen = prefill_lengths(axes["chunk"])
    cost, what = ascend_cost_grid(table, dnum, plen)
    ctx = np.asarray(axes["ctx"], dtype=np.int64)
    c, d, p = (a.ravel() for a in np.meshgrid(ctx, dnum, plen, indexing="ij"))
    rows = {"chunk_size": p + d, "p_len": p, "d_num": d, "ctx_len": c, "cost": cost.ravel()}
    measured = pd.DataFrame({**rows, "floor": False})
    fc, fd = (a.ravel() for a in np.meshgrid(ctx, dnum, indexing="ij"))
    floor = pd.DataFrame(
        {"chunk_size": fd, "p_len": 0, "d_num": fd, "ctx_len": fc, "cost": 0.0, "floor": True}
    )
    frame = pd.concat([floor, measured], ignore_index=True)
    if cap is not None:
        frame = frame[frame["chunk_size"] <= cap]
    frame = frame.sort_values(
        ["ctx_len", "d_num", "floor", "p_len"],
        ascending=[True, True, False, True],
        kind="stable",
    )
    frame = frame.loc[:, list(COLUMNS)].reset_index(drop=True)
    notes = [
        what,
        f"d_num 1..{d_top} (every value), ctx_len keys {', '.join(str(int(x)) for x in ctx)}: "
        f"run vLLM with --max-num-seqs <= {d_top} and --max-model-len <= {int(ctx[-1])}, "
        "beyond either the reader falls back to max_num_batched_tokens",
        "each (ctx_len, d_num) has a floor row (p_len 0, cost 0, not a measurement): budget "
        "d_num, no prefill, when the decodes alone exceed the SLO limit",
    ]
    if cap is None:
        notes.append(
            f"chunk_size up to {int(plen[-1]) + d_top}: set vLLM's --max-num-batched-tokens "
            "at least that high, or cap the rows with --max-num-batched-tokens"
        )
    return frame, notes


def render(table: CostTable, options: ExportOptions) -> Rendered:
    """The ``vllm-ascend`` exporter: ``profile_table.csv``, costs rounded up."""
    frame, notes = ascend_profile(table, options.max_num_batched_tokens)
    text = frame.to_csv(index=False, float_format=f"%.{COST_DECIMALS}f")
    return Rendered(text.encode(), len(frame), tuple(notes))
