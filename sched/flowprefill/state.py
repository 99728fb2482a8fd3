"""Per-request prefill state of the operator-level driver, read by policies.

A request's prompt is prefilled in one or more *chunks* (one, the whole prompt,
for FlowPrefill and FCFS; 512 or 2048 tokens for the chunked baselines). A chunk
in flight is a sequence of operators (:mod:`.operators`); ``ops_done`` counts
those finished. A request parked at an operator boundary keeps its KV, its chunk
and its ``ops_done``: resuming runs the remaining operators only.
"""

from __future__ import annotations

import math

from servecal.sched.request import Request


class Job:
    """One request on the prefill side. Only the driver writes the fields."""

    __slots__ = (
        "request",
        "rid",
        "arrival_ms",
        "ttft_slo_ms",
        "prompt_tokens",
        "deadline_ms",
        "tokens_done",
        "chunk",
        "ops_done",
        "holds_kv",
        "kv_tokens",
        "pred_rest_ms",
        "first_ms",
        "parks",
        "on_device",
    )

    def __init__(self, request: Request) -> None:
        self.request = request
        self.rid = request.rid
        self.arrival_ms = request.arrival_ms
        self.ttft_slo_ms = request.ttft_slo_ms
        self.prompt_tokens = request.prompt_tokens
        #: FlowPrefill's deadline ``d = arrival + TTFT_SLO``.
        self.deadline_ms = request.arrival_ms + request.ttft_slo_ms
        self.tokens_done = 0  # prompt tokens of finished chunks
        self.chunk = 0  # tokens of the chunk in flight (0: none)
        self.ops_done = 0  # operators of the chunk in flight already run
        self.holds_kv = False
        self.kv_tokens = 0  # KV reserved for this request now
        self.pred_rest_ms = math.nan  # cached prediction of the rest (no chunk in flight)
        self.first_ms = math.nan
        self.parks = 0  # times parked at an operator boundary
        self.on_device = False  # in the batch the device runs now

    @property
    def remaining_tokens(self) -> int:
        """Prompt tokens not yet prefilled (the chunk in flight counts as not done)."""
        return self.prompt_tokens - self.tokens_done

    @property
    def in_flight(self) -> bool:
        """A chunk is partly run: the request is parked mid-chunk (or on the device)."""
        return self.ops_done > 0

    @property
    def fresh(self) -> bool:
        """Never started: holds no KV, nothing prefilled."""
        return not self.holds_kv

    def __repr__(self) -> str:
        return (
            f"Job(rid={self.rid}, done={self.tokens_done}/{self.prompt_tokens}, "
            f"chunk={self.chunk}, ops_done={self.ops_done}, on_device={self.on_device})"
        )
