"""Per-iteration records and the observer hook (online validation, drift monitors).

For each iteration the engine builds one :class:`IterationRecord` and passes it to
every observer's ``observe``; a predictor that has ``observe`` (an adaptive-margin
wrapper) is called too. ``observe`` may return a dict of extra columns for that
iteration's row (e.g. ``{"drift_state": "ok"}``); ``summary()`` goes into
``run.json``. With no observer and a predictor without ``observe`` the engine
builds no records and computes the logged predictions in one vectorised call at
the end of the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class IterationRecord:
    """What one iteration was predicted to cost and what it cost (times in ms)."""

    index: int
    start_ms: float
    n_decode: int
    chunk: int
    ctx: float
    prefix: float
    pred_p50: float
    pred_p99: float
    margin: float
    actual_ms: float
    energy_j: float | None


@runtime_checkable
class Observer(Protocol):
    """Consumes the iteration stream."""

    def observe(self, record: IterationRecord) -> dict[str, Any] | None: ...

    def summary(self) -> dict[str, Any]: ...
