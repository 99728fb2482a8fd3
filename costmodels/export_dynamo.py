"""A cost table as the performance model of NVIDIA Dynamo's mocker (``ai-dynamo``).

Written for **ai-dynamo 1.6.1** (PyPI; its ``ai-dynamo-runtime`` holds the mocker's
engine). ``python -m dynamo.mocker --planner-profile-data perf_data.npz`` (or the
timing model ``{"type": "external", "provider": "dynamo_profile", "config": {"path":
...}}`` of its offline replay) loads a NumPy ``.npz`` with five arrays, which
``dynamo.mocker.utils.planner_profiler_perf_data_converter.is_mocker_format_npz``
checks by name, and reads them (``PerfModel::from_npz``, the mocker's
``common/perf_model.rs``) as:

* ``prefill_isl`` (1-D, tokens) → ``prefill_ttft_ms`` (1-D, same length): the time of a
  prefill of ``batch · (isl − cached prefix)`` new tokens, **linear** between points
  and extrapolated linearly beyond them;
* ``decode_active_kv_tokens`` (1-D, rows) × ``decode_context_length`` (1-D, columns) →
  ``decode_itl`` (2-D, ``[kv_index, context_index]``): the time of a decode step of
  ``batch`` requests holding ``active_kv_tokens`` in all, ``context_length`` each on
  average (``active_kv_tokens / batch``), **bilinear** between points and
  extrapolated; at least 1 ms;
* a step that prefills and decodes takes the sum of the two.

What servecal writes, from the table's P50 (the format has no place for a tail):

* prefill: ``P50(n_decode=0, chunk=isl, ctx=the first ctx, prefix=0)`` at every grid
  ``chunk ≥ 1`` and :data:`PREFILL_STEPS` points between neighbours, so the mocker's
  line between two points is the table's own interpolation, point for point;
* decode: ``P50(n = kv / ctx, chunk=0, ctx, prefix=0)`` on a grid of
  :data:`KV_PER_OCTAVE` active-KV points per doubling, from the smallest batch at the
  smallest context to the largest batch at the largest, times the table's contexts
  with :data:`CTX_STEPS` points between neighbours: the mocker reads a batch at
  ``(n · ctx, ctx)``, where the table is sampled densely enough that its bilinear
  reading stays within a few per cent of the table's (the test measures it). Cells
  whose ``kv / ctx`` is past the table's batches continue the table's last slope in
  ``n`` (:func:`decode_p50`); a batch the table never measured is that guess, so run
  the mocker with ``--max-num-seqs`` at most the table's largest ``n_decode``.

Refused (one ``error:`` line, exit 2, nothing written): a table without a P50, without
a prefill step (no ``chunk ≥ 1``) or without a decode step (no ``n_decode ≥ 1`` or no
``ctx ≥ 1``), or whose P50 is not a positive finite number somewhere on the grid.
"""

from __future__ import annotations

import io

import numpy as np

from servecal.costmodels.export import ExportOptions, Rendered
from servecal.costmodels.table import CostTable
from servecal.util.errors import InputError

#: The arrays the mocker reads (``is_mocker_format_npz``'s required keys).
MOCKER_KEYS = (
    "prefill_isl",
    "prefill_ttft_ms",
    "decode_active_kv_tokens",
    "decode_context_length",
    "decode_itl",
)
#: Points written between neighbouring grid chunks (prefill) and contexts (decode).
PREFILL_STEPS = 8
CTX_STEPS = 4
#: Active-KV points per doubling (a geometric axis: 4.4 % apart).
KV_PER_OCTAVE = 16


def p50(table: CostTable, fmt: str) -> None:
    """Refuse a table without a P50 (``fmt`` names the format in the line)."""
    if 0.5 not in table.quantiles:
        have = ", ".join(f"P{q * 100:g}" for q in table.quantiles)
        raise InputError(f"--format {fmt}: the table has no P50 (it has {have})")


def positive_axis(table: CostTable, axis: str, fmt: str, fills: str) -> np.ndarray:
    """The table's grid values ``>= 1`` on ``axis``; refused when there are none."""
    values = np.asarray([v for v in table.axes[axis] if v >= 1], dtype=float)
    if values.size == 0:
        raise InputError(
            f"--format {fmt}: the table has no {axis} >= 1, so {fills} cannot be filled"
        )
    return values


def checked(values: np.ndarray, fmt: str, what: str) -> np.ndarray:
    """``values`` when every one is a positive finite number, else refused."""
    bad = ~np.isfinite(values) | (values <= 0)
    if bad.any():
        raise InputError(
            f"--format {fmt}: the table's P50 is not a positive number at "
            f"{int(bad.sum())} of the {values.size} {what} points"
        )
    return values


def between(values: np.ndarray, steps: int) -> np.ndarray:
    """``values`` and ``steps`` evenly spaced points between each neighbouring pair (a
    single value and its double: the mocker's interpolators need two points)."""
    if values.size == 1:
        return np.array([values[0], 2 * values[0]])
    parts = [
        np.linspace(a, b, steps + 1, endpoint=False)
        for a, b in zip(values[:-1], values[1:], strict=True)
    ]
    return np.unique(np.concatenate([*parts, values[-1:]]))


def decode_p50(table: CostTable, n: np.ndarray, ctx: np.ndarray) -> np.ndarray:
    """``P50(n, 0, ctx, 0)``, continued along a line in ``n`` past the table's batches.

    The mocker reads a cell beyond them only through its bilinear neighbours of a batch
    inside them: a clamped cell would bend that reading (4 % at 256 decodes on the
    shipped H100 table), the table's own last slope keeps it straight."""
    grid = np.asarray(table.axes["n_decode"], dtype=float)
    inside = np.clip(n, grid[0], grid[-1])
    value, _ = table.lookup(0.5, inside, 0, ctx, 0)
    if grid.size < 2:
        return np.asarray(value, dtype=float)
    for edge, other in ((grid[-1], grid[-2]), (grid[0], grid[1])):
        past = n > edge if edge == grid[-1] else n < edge
        if past.any():
            at_edge, _ = table.lookup(0.5, edge, 0, ctx, 0)
            at_other, _ = table.lookup(0.5, other, 0, ctx, 0)
            slope = (at_edge - at_other) / (edge - other)
            line = at_edge + slope * (n - edge)
            # below the first batch: never under half its time (a steep slope would
            # reach zero; those cells are only neighbours of batches >= 1)
            value = np.where(past, np.maximum(line, 0.5 * at_edge), value)
    return np.asarray(value, dtype=float)


def mocker_arrays(table: CostTable) -> dict[str, np.ndarray]:
    """The five arrays of the mocker's NPZ for ``table`` (refusals as the module says)."""
    fmt = "dynamo-mocker"
    p50(table, fmt)
    chunks = positive_axis(table, "chunk", fmt, "prefill_ttft_ms")
    batches = positive_axis(table, "n_decode", fmt, "decode_itl")
    contexts = positive_axis(table, "ctx", fmt, "decode_itl")
    ctx0 = float(table.axes["ctx"][0])
    isl = between(chunks, PREFILL_STEPS)
    ttft, _ = table.lookup(0.5, 0, isl, ctx0, 0)
    ctx = between(contexts, CTX_STEPS)
    lo, hi = batches[0] * contexts[0], batches[-1] * contexts[-1]
    octaves = np.log2(hi / lo) if hi > lo else 0.0
    kv = np.unique(
        lo * 2.0 ** (np.arange(int(np.ceil(octaves * KV_PER_OCTAVE)) + 1) / KV_PER_OCTAVE)
    )
    kv[-1] = max(kv[-1], hi)
    if kv.size == 1:
        kv = np.array([lo, 2 * lo])
    kv_grid, ctx_grid = np.meshgrid(kv, ctx, indexing="ij")
    itl = decode_p50(table, kv_grid / ctx_grid, ctx_grid)
    return {
        "prefill_isl": isl,
        "prefill_ttft_ms": checked(np.asarray(ttft, dtype=float), fmt, "prefill"),
        "decode_active_kv_tokens": kv,
        "decode_context_length": ctx,
        "decode_itl": checked(np.asarray(itl, dtype=float), fmt, "decode"),
    }


def render(table: CostTable, options: ExportOptions) -> Rendered:
    """The NPZ's bytes; notes say the batch the decode grid reaches."""
    arrays = mocker_arrays(table)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    n_max = max(table.axes["n_decode"])
    itl = arrays["decode_itl"]
    notes = (
        f"prefill: {arrays['prefill_isl'].size} points, {arrays['prefill_isl'][0]:g}.."
        f"{arrays['prefill_isl'][-1]:g} tokens (linear beyond them in the mocker)",
        f"decode: {itl.shape[0]} active-KV x {itl.shape[1]} context points; past {n_max} "
        f"decodes the table's last slope is continued: run the mocker with --max-num-seqs "
        f"<= {n_max}",
    )
    return Rendered(buffer.getvalue(), int(arrays["prefill_isl"].size + itl.size), notes, "points")
