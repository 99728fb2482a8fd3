"""Scale a workload with prefix identity down to another block size (a small server).

A Mooncake trace's blocks are 512 tokens and its prompts 12,000 tokens on average: a
tiny model on a CPU serves the same *structure* with fewer tokens. :func:`with_block_size`
makes every block of a request ``block_size`` tokens instead: a request keeps its block
ids (so exactly the same requests share exactly the same prefixes), its full blocks
become ``block_size`` tokens each, its partial last block the same share of
``block_size`` (at least 1 token), and its output is scaled by the same factor (at
least 1 token). Arrivals and SLOs are kept. Requests without identity are unchanged.
"""

from __future__ import annotations

import math
from dataclasses import replace

from servecal.sched.request import Request


def scaled_prompt(prompt_tokens: int, old_block: int, new_block: int) -> int:
    """A prompt of ``prompt_tokens`` in blocks of ``old_block``, in blocks of
    ``new_block``: as many full blocks, and the partial last one scaled (≥ 1 token)."""
    full, rest = divmod(prompt_tokens, old_block)
    tail = max(1, math.ceil(rest * new_block / old_block)) if rest else 0
    return full * new_block + tail


def with_block_size(requests: list[Request], block_size: int) -> list[Request]:
    """``requests`` with their prefix blocks ``block_size`` tokens each (module docstring)."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    out = []
    for r in requests:
        if not r.block_ids or r.block_size == block_size:
            out.append(r)
            continue
        factor = block_size / r.block_size
        out.append(
            replace(
                r,
                prompt_tokens=scaled_prompt(r.prompt_tokens, r.block_size, block_size),
                output_tokens=max(1, round(r.output_tokens * factor)),
                block_size=block_size,
            )
        )
    return out
