"""What an operator-level prefill policy reads (:class:`DriverView`) and returns
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

from collections.abc import Callable, Sequence, ValuesView
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from servecal.costmodels.predictor import Predictor
from servecal.sched.flowprefill.state import Job

if TYPE_CHECKING:
    from servecal.sched.flowprefill.driver import OperatorDriver


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


class DriverView:
    """The read-only driver state a policy plans from: reads only, changes nothing.

    Its methods are the driver's own, bound once (no indirection per call): the
    driver keeps its prediction memos itself.
    """

    __slots__ = ("_d", "kv_need", "remaining_ms", "batch_ms")

    def __init__(self, driver: OperatorDriver) -> None:
        self._d = driver
        #: ``kv_need(job)``: KV tokens ``job`` must reserve to start (0 when it holds its KV).
        self.kv_need: Callable[[Job], int] = driver.kv_need
        #: ``remaining_ms(job)``: predicted time to finish ``job``'s prefill alone from now.
        self.remaining_ms: Callable[[Job], float] = driver.remaining_ms
        #: ``batch_ms(tokens, prefixes)``: predicted time of one prefill iteration of
        #: these fresh chunks.
        self.batch_ms: Callable[[Sequence[int], Sequence[int]], float] = driver.batch_ms

    @property
    def now_ms(self) -> float:
        return self._d.now_ms

    @property
    def kv_capacity(self) -> int:
        return self._d.kv_capacity

    @property
    def kv_used(self) -> int:
        return self._d.kv_used

    @property
    def kv_free(self) -> int:
        return self._d.kv_capacity - self._d.kv_used

    @property
    def kv_decoding(self) -> int:
        """KV reserved by requests that finished their prefill and decode (colocated)."""
        return self._d.kv_decoding

    @property
    def jobs(self) -> ValuesView[Job]:
        """Every request with prefill left (on the device, parked, waiting), by arrival."""
        return self._d.jobs

    @property
    def on_device(self) -> tuple[Job, ...]:
        """The batch on the device now (empty when the device is free)."""
        return self._d.on_device


@runtime_checkable
class PrefillPolicy(Protocol):
    """Chooses what the prefill side runs next."""

    preemptive: bool

    def decide(self, view: DriverView, predictor: Predictor) -> Decision: ...
