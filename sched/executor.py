"""Executors run one iteration of a given shape and say how long it took.

The protocol is one method, so a torch executor running real forward passes fits
beside the simulated one::

    execute(n_decode, chunk, ctx, prefix, now_ms) -> (duration_ms, energy_j | None)

``chunk`` is the iteration's total prefill tokens, ``ctx`` the mean KV length of
its decodes and ``prefix`` the (token-weighted mean) number of prompt tokens of
the chunks already in KV. ``energy_source`` names where energy comes from:
``"none"``, ``"samples"`` or ``"model"``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Executor(Protocol):
    """Runs iterations."""

    energy_source: str

    def execute(
        self, n_decode: int, chunk: int, ctx: float, prefix: float, now_ms: float
    ) -> tuple[float, float | None]: ...
