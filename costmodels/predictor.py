"""The predictor contract every iteration-cost model implements (docs/design.md "Predictor").

A predictor answers three questions about one engine iteration with ``n_decode``
decode tokens, a prefill chunk of ``chunk`` tokens whose first ``prefix`` prompt
tokens are already cached, and decodes whose mean KV length is ``ctx``:

* ``predict(n_decode, chunk, ctx, prefix, q)``: the ``q``-quantile of its time in ms;
* ``margin(n_decode, chunk, ctx, prefix)``: the calibrated safety margin δ in ms, so
  that ``P(actual > predict(q=0.99) + margin) <= 1%``;
* ``max_chunk(n_decode, ctx, prefix, budget_ms, limit)``: the largest chunk
  ``c <= limit`` with ``predict(n, c, ctx, prefix, q) + margin(...) <= budget_ms``,
  or 0 when none fits. Deadline-aware policies call it every iteration.

Scalars in give Python floats out; numpy arrays broadcast and give arrays out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

#: Quantile a deadline-aware policy plans on by default.
PLAN_QUANTILE = 0.99
#: The tail quantile a run logs beside every iteration (``pred_p99_ms``), whose
#: calibrated bound ``P99 + margin`` the online coverage checks, whatever quantile a
#: policy planned on.
TAIL_QUANTILE = 0.99


@runtime_checkable
class Predictor(Protocol):
    """Iteration-cost predictor (see module docstring for the exact semantics)."""

    def predict(
        self,
        n_decode: ArrayLike,
        chunk: ArrayLike,
        ctx: ArrayLike = 0,
        prefix: ArrayLike = 0,
        q: float = 0.5,
    ) -> float | np.ndarray: ...

    def margin(
        self,
        n_decode: ArrayLike,
        chunk: ArrayLike,
        ctx: ArrayLike = 0,
        prefix: ArrayLike = 0,
    ) -> float | np.ndarray: ...

    def max_chunk(
        self,
        n_decode: int,
        ctx: int,
        prefix: int,
        budget_ms: float,
        limit: int,
        q: float = PLAN_QUANTILE,
        use_margin: bool = True,
    ) -> int: ...


def largest_fitting(fits: Callable[[int], bool], limit: int) -> int:
    """Largest ``c`` in ``[1, limit]`` with ``fits(c)``, or 0 if none; ``fits`` monotone.

    ``fits`` must be true on a prefix of ``1..limit`` and false after it (the cost
    is non-decreasing in ``c``); this takes ``O(log limit)`` calls.
    """
    if limit < 1 or not fits(1):
        return 0
    lo, hi = 1, int(limit)  # invariant: fits(lo); answer in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo
