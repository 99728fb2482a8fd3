"""The policy protocol: one method.

A policy is any object with ``plan(view, predictor) -> Plan``. It reads the engine
through the :class:`~servecal.sched.view.EngineView` and never changes engine
state; it may keep private state of its own (a fresh policy is built per run).

Optional hooks, used when present:

* ``observe(record) -> dict | None`` and ``summary() -> dict``: the policy is also
  an :class:`~servecal.sched.observe.Observer` of the iteration stream.

An event-driven policy (FlowPrefill) keeps its last decision and recomputes it only
when ``view.new_arrivals`` / ``view.new_prefills_done`` / ``view.new_finished`` are
non-empty; the engine counts ``plan`` calls and their decision time either way.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from servecal.costmodels.predictor import Predictor
from servecal.sched.plan import Plan
from servecal.sched.view import EngineView


@runtime_checkable
class Policy(Protocol):
    """Plans one iteration from a read-only view of the engine."""

    def plan(self, view: EngineView, predictor: Predictor) -> Plan: ...
