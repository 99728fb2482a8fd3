"""A request as a workload produces it: immutable facts, no runtime state.

All times in the sched stage are milliseconds from the start of the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Request:
    """One inference request with its SLOs.

    ``tpot_slo_ms`` is the per-token deadline ``D_i`` of SLOWeave (docs/spec.md §1);
    ``ttft_slo_ms`` bounds arrival → first output token. ``slo_class`` names the
    class a multi-SLO workload drew it from (``"default"`` otherwise).

    ``block_ids`` is the prompt's prefix identity (docs/prefix_cache.md): one id per
    ``block_size`` prompt tokens (the last block may be partial), as in Mooncake's
    traces: two requests whose leading ids agree share that prompt prefix, so a
    prefix cache can serve it. Empty (the default): no identity, never a cache hit.
    """

    rid: int
    arrival_ms: float
    prompt_tokens: int
    output_tokens: int
    ttft_slo_ms: float = math.inf
    tpot_slo_ms: float = math.inf
    slo_class: str = "default"
    block_ids: tuple[int, ...] = ()
    block_size: int = 512

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1:
            raise ValueError(f"request {self.rid}: prompt_tokens must be >= 1")
        if self.output_tokens < 1:
            raise ValueError(f"request {self.rid}: output_tokens must be >= 1")
        if not self.arrival_ms >= 0:
            raise ValueError(f"request {self.rid}: arrival_ms must be >= 0")
        if not (self.ttft_slo_ms > 0 and self.tpot_slo_ms > 0):
            raise ValueError(f"request {self.rid}: SLOs must be > 0")
        if self.block_size < 1:
            raise ValueError(f"request {self.rid}: block_size must be >= 1")
