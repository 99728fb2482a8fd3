"""What an operator-level prefill policy reads (:class:`PrefillView`) and returns
(:class:`Decision`).

A policy is any object with ``decide(view, predictor) -> Decision`` and a
``preemptive`` flag. A preemptive policy is woken on request arrivals, prefill
completions and at an operator boundary where it asked the running batch to stop
(event-driven mode), or at every operator boundary (per-iteration mode, for
comparison); when the first request of its decision is not in the running batch,
the driver parks that batch at its next operator boundary. A non-preemptive
policy is woken only when the device is free (end of its iteration, or an
arrival to an idle device), like an iteration-level engine.
"""

from __future__ import annotations

from collections.abc import Sequence, ValuesView
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from servecal.costmodels.predictor import Predictor
from servecal.sched.flowprefill.state import Job


@dataclass(frozen=True, slots=True)
class Decision:
    """``run``: ``(rid, tokens)`` chunks to prefill together now, the top request
    first; empty: run nothing (keep the running batch, or stay idle).

    A request parked mid-chunk must be named with its chunk in flight and can only
    share a batch with requests parked at the same operator; a fresh one must fit
    in the free KV.
    """

    run: tuple[tuple[int, int], ...] = ()

    @property
    def top(self) -> int | None:
        return self.run[0][0] if self.run else None


class PrefillView(Protocol):
    """The read-only driver state a policy plans from."""

    @property
    def now_ms(self) -> float: ...

    @property
    def kv_capacity(self) -> int: ...

    @property
    def kv_free(self) -> int: ...

    @property
    def jobs(self) -> ValuesView[Job]:
        """Every request with prefill left (running, parked, waiting), by arrival."""
        ...

    @property
    def running(self) -> tuple[Job, ...]:
        """The batch on the device now (empty when the device is free)."""
        ...

    def kv_need(self, job: Job) -> int:
        """KV tokens ``job`` must reserve to start (0 when it already holds its KV)."""
        ...

    def remaining_ms(self, job: Job) -> float:
        """Predicted time to finish ``job``'s prefill if it ran alone from now."""
        ...

    def batch_ms(self, tokens: Sequence[int], prefixes: Sequence[int]) -> float:
        """Predicted time of one prefill iteration of these fresh chunks."""
        ...


@runtime_checkable
class PrefillPolicy(Protocol):
    """Chooses what the prefill side runs next."""

    preemptive: bool

    def decide(self, view: PrefillView, predictor: Predictor) -> Decision: ...
