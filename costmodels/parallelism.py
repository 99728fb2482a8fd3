"""Tensor parallelism as the cost contract sees it: which TP degree some times are for.

A cost table's times are one model replica's iteration on ``tp`` GPUs (with its
all-reduces when ``tp > 1``). A table used against samples or a run of another TP
degree prices another deployment; :func:`tp_mismatch` words the one-line warning
``simulate --predictor`` and ``validate`` print then.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def provenance_tp(provenance: Mapping[str, Any]) -> int:
    """The ``tp`` a samples provenance records (samples from before TP are TP 1)."""
    tp = provenance.get("tp", 1)
    return tp if isinstance(tp, int) and not isinstance(tp, bool) and tp >= 1 else 1


def samples_tp(path: str | Path) -> int:
    """The TP degree of a samples file (its provenance; InputError if unreadable)."""
    from servecal.costmodels.samples import read_samples

    return provenance_tp(read_samples(path).provenance)


def tp_mismatch(table: str | Path, table_tp: int, other: str, other_tp: int | None) -> str | None:
    """The one-line warning when ``other`` (samples, a run) is at another TP degree, else None."""
    if other_tp is None or other_tp == table_tp:
        return None
    return (
        f"warning: {table} is a TP {table_tp} table but {other} is TP {other_tp}: "
        "its times (and all-reduces) are another deployment's"
    )
