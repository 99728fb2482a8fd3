"""A cost table as vllm-ascend's dynamic-batch profile table (``profile_table.csv``).

vllm-ascend's ``SchedulerDynamicBatch`` (``--additional-config
'{"SLO_limits_for_dynamic_batch": T}'``) reads ``vllm_ascend/core/profile_table.csv``
with the columns ``chunk_size, p_len, d_num, ctx_len, cost``: one row per measured
iteration of ``d_num`` decodes of mean context ``ctx_len`` and a prefill of
``p_len`` tokens, ``chunk_size = p_len + d_num`` tokens in all, that took ``cost``
ms. Its ``BudgetRefiner`` keeps, per ``(ctx_len, d_num)``, the largest
``chunk_size`` whose ``cost <= T`` and uses it as the step's token budget, looking
a running batch up at the smallest ``ctx_len`` and ``d_num`` keys at or above its
own (no key that large: it falls back to ``max_num_batched_tokens``).

The export writes the table's planning bound ``P99 + δ`` as ``cost`` (its P50
when the table has no margin, with a note), so ``T`` is a TPOT SLO in ms, at
every ``(n_decode, ctx)`` grid point and for ``p_len`` on the chunk grid plus
every :data:`P_LEN_STEP` tokens between (the table interpolates there, as its own
``max_chunk`` does), with no cached prefix.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from servecal.costmodels.table import CostTable

#: Column order of vllm-ascend's file.
COLUMNS = ("chunk_size", "p_len", "d_num", "ctx_len", "cost")
#: Spacing of the prefill lengths written between the table's chunk grid values.
P_LEN_STEP = 16


def prefill_lengths(chunks: tuple[int, ...], step: int = P_LEN_STEP) -> np.ndarray:
    """0 (decodes alone), the chunk grid's values and every ``step`` tokens up to its
    last one."""
    top = int(chunks[-1])
    grid = np.union1d(np.asarray(chunks, dtype=np.int64), np.arange(0, top + 1, step))
    return grid.astype(np.int64)


def ascend_profile(table: CostTable) -> tuple[pd.DataFrame, list[str]]:
    """The profile table's rows, ordered by ``ctx_len, d_num, p_len``, and notes."""
    axes = table.axes
    ctx, dnum, plen = np.meshgrid(
        np.asarray(axes["ctx"], dtype=np.int64),
        np.asarray(axes["n_decode"], dtype=np.int64),
        prefill_lengths(axes["chunk"]),
        indexing="ij",
    )
    ctx, dnum, plen = ctx.ravel(), dnum.ravel(), plen.ravel()
    keep = dnum + plen > 0  # an empty iteration is not a step
    ctx, dnum, plen = ctx[keep], dnum[keep], plen[keep]
    notes = []
    if table.margin_info is not None:
        cost = table.lookup_bound(dnum, plen, ctx, 0)
        notes.append(f"cost = P{table.tail * 100:g} + margin (ms): set the SLO limit to a TPOT SLO")
    else:
        cost, _ = table.lookup(0.5, dnum, plen, ctx, 0)
        notes.append("cost = P50 (ms): the table has no calibrated margin, so no tail bound")
    frame = pd.DataFrame(
        {
            "chunk_size": plen + dnum,
            "p_len": plen,
            "d_num": dnum,
            "ctx_len": ctx,
            "cost": np.round(np.asarray(cost, dtype=float), 4),
        },
        columns=list(COLUMNS),
    )
    notes.append(
        f"keys: ctx_len up to {int(axes['ctx'][-1])}, d_num up to {int(axes['n_decode'][-1])}; "
        "larger batches fall back to vllm-ascend's max_num_batched_tokens"
    )
    return frame, notes
