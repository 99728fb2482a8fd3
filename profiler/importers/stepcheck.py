"""Composed steps against measured ones, graded per step kind.

A mean over every step hides a composition that prices one kind well and another badly
(decode-only steps right, mixed ones a quarter high), so each kind is graded on its own:
``decode`` (decodes only), ``mixed`` (decodes and at least one prefill chunk), ``prefill``
(chunks only). Per kind: the steps, the median of ``|predicted/measured - 1|``, the median
``predicted/measured`` and how many steps read beyond the profile (priced by
extrapolation: counted, never dropped).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from servecal.profiler.design import Point
from servecal.profiler.importers.compose import StepComposition, compose_row
from servecal.profiler.shapes import ModelShape

STEP_KINDS = ("decode", "mixed", "prefill")


def step_kind(n_decode: Any, chunk: Any) -> np.ndarray:
    """``decode``, ``mixed`` or ``prefill`` per step."""
    n, c = np.asarray(n_decode), np.asarray(chunk)
    return np.where(c == 0, "decode", np.where(n == 0, "prefill", "mixed"))


def composed_steps(
    sources: dict[int, Any],
    shape: ModelShape,
    steps: pd.DataFrame,
    composition: StepComposition | None = None,
) -> pd.DataFrame:
    """Per step (``n_decode, chunk, ctx, prefix`` and ``tp`` when ``sources`` has several
    degrees): the composed ``predicted`` ms and ``beyond`` (reads beyond the profile)."""
    predicted, beyond = [], []
    for r in steps.itertuples(index=False):
        source = sources[int(getattr(r, "tp", next(iter(sources))))]
        before = source.log.count
        point = Point(int(r.n_decode), int(r.chunk), int(r.ctx), int(r.prefix))
        predicted.append(compose_row(source, shape, point, composition)["ms"])
        beyond.append(source.log.count - before)
    return steps.assign(predicted=predicted, beyond=beyond)


def by_kind(steps: pd.DataFrame) -> pd.DataFrame:
    """One row per kind present in ``steps`` (columns ``n_decode, chunk, ms, predicted``,
    optional ``beyond``): steps, median error, median ratio, steps beyond the profile."""
    kinds = step_kind(steps["n_decode"], steps["chunk"])
    ratio = steps["predicted"].to_numpy(float) / steps["ms"].to_numpy(float)
    beyond = steps["beyond"].to_numpy() if "beyond" in steps else np.zeros(len(steps))
    rows = []
    for kind in STEP_KINDS:
        sel = kinds == kind
        if sel.any():
            rows.append(
                {
                    "kind": kind,
                    "steps": int(sel.sum()),
                    "median_error": float(np.median(np.abs(ratio[sel] - 1))),
                    "median_ratio": float(np.median(ratio[sel])),
                    "beyond_profile": int((beyond[sel] > 0).sum()),
                }
            )
    return pd.DataFrame(rows)
