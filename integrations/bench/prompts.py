"""Token-id prompts for the bench: random, or realising a workload's shared prefixes.

A request without prefix identity gets random token ids (seeded: the same work every
run). A request with identity (:attr:`Request.block_ids`, docs/prefix_cache.md) gets,
for its ``k``-th block, the ``block_size`` token ids of that block's id — a pure
function of the id and the seed — cut to its prompt length. So two requests whose
leading block ids agree send exactly the same leading tokens, block for block, and a
server's prefix cache sees the prefixes the workload describes. Prompts go out as
token ids, so no tokenizer can change them; with the server's KV block size equal to
the workload's block size, a server block is a workload block.
"""

from __future__ import annotations

import numpy as np

from servecal.sched.request import Request

#: Prompt token ids are drawn from this range: inside any real vocabulary, clear of
#: the special tokens at the bottom.
PROMPT_IDS = (100, 1000)
#: Block ids are folded into the seed modulo this (a seed is a non-negative integer).
_ID_SPACE = 1 << 64


class BlockTokens:
    """The token ids of each block id (drawn once per id, kept)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._known: dict[tuple[int, int], np.ndarray] = {}

    def __call__(self, block_id: int, size: int) -> np.ndarray:
        key = (block_id, size)
        tokens = self._known.get(key)
        if tokens is None:
            rng = np.random.default_rng([self.seed % _ID_SPACE, block_id % _ID_SPACE, size])
            tokens = rng.integers(*PROMPT_IDS, size=size)
            self._known[key] = tokens
        return tokens


def prefix_prompt(req: Request, blocks: BlockTokens, rng: np.random.Generator) -> list[int]:
    """``req``'s prompt: its blocks' tokens, then random ids past its last block (none
    when the ids cover the prompt, as a trace's do)."""
    parts = [blocks(b, req.block_size) for b in req.block_ids]
    ids = np.concatenate(parts)[: req.prompt_tokens] if parts else np.zeros(0, dtype=np.int64)
    missing = req.prompt_tokens - ids.size
    if missing > 0:
        ids = np.concatenate([ids, rng.integers(*PROMPT_IDS, size=missing)])
    return ids.tolist()


def prompt_ids(requests: list[Request], seed: int) -> list[list[int]]:
    """One token-id prompt per request (module docstring)."""
    rng = np.random.default_rng(seed)
    blocks = BlockTokens(seed)
    out = []
    for r in requests:
        if r.block_ids:
            out.append(prefix_prompt(r, blocks, rng))
        else:
            out.append(rng.integers(*PROMPT_IDS, size=r.prompt_tokens).tolist())
    return out
