"""A KV block cache: the prompt prefixes an engine keeps computed (docs/prefix_cache.md).

Blocks of ``block_size`` prompt tokens are addressed by a chained key (a block's key
hashes its parent's key with its own id, as vLLM's block hashes do), so a block is
found only behind the same prefix. A block has a reference count (the running, or
pinned waiting, requests that use it); unreferenced blocks stay cached in the KV
memory no request holds and are evicted least recently used first when that memory
is needed (or beyond ``max_cached_tokens``).

This module keeps the blocks and counts; the engine (:mod:`servecal.sched.engine`)
decides when a request looks up, references, inserts and releases them and does the
KV accounting. Everything is in whole blocks; a counter of tokens is blocks times
the block size.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

#: Parent key of a prompt's first block.
_ROOT = 0x5EC0CA1


@dataclass(frozen=True)
class PrefixCacheConfig:
    """``block_size``: tokens per block (Mooncake's 512 by default; every request's
    ``block_size`` must match). ``max_cached_tokens``: a cap on the unreferenced
    (evictable) blocks kept, ``None`` for all the KV memory no request holds."""

    block_size: int = 512
    max_cached_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError("PrefixCacheConfig.block_size must be >= 1")
        if self.max_cached_tokens is not None and self.max_cached_tokens < 0:
            raise ValueError("PrefixCacheConfig.max_cached_tokens must be >= 0")


def chain_keys(block_ids: Sequence[int], n_blocks: int) -> tuple[int, ...]:
    """Chained keys of the first ``n_blocks`` ids: each hashes its parent's key and its
    own id, so equal keys mean an equal prefix (Python's int-tuple hash is stable)."""
    keys = []
    parent = _ROOT
    for block in block_ids[:n_blocks]:
        parent = hash((parent, block))
        keys.append(parent)
    return tuple(keys)


class PrefixCache:
    """Blocks by key with reference counts and an LRU list of the unreferenced ones.

    Counters (read by the result builder): ``evictions`` (blocks evicted),
    ``revived`` (unreferenced blocks a request referenced again); ``cached_tokens``:
    tokens in unreferenced (evictable) blocks, an attribute the engine reads every
    iteration."""

    __slots__ = (
        "block_size",
        "max_cached_blocks",
        "_refs",
        "_lru",
        "evictions",
        "revived",
        "cached_tokens",
    )

    def __init__(self, config: PrefixCacheConfig) -> None:
        self.block_size = config.block_size
        cap = config.max_cached_tokens
        self.max_cached_blocks = None if cap is None else cap // config.block_size
        self._refs: dict[int, int] = {}  # key -> reference count (0: in _lru)
        self._lru: OrderedDict[int, None] = OrderedDict()  # unreferenced, oldest first
        self.evictions = 0
        self.revived = 0
        self.cached_tokens = 0

    def __contains__(self, key: int) -> bool:
        return key in self._refs

    def match(self, keys: Sequence[int], limit: int) -> tuple[int, int]:
        """(blocks of the longest cached run of ``keys[:limit]``, how many of those are
        unreferenced): nothing changes."""
        refs = self._refs
        n = unreferenced = 0
        for key in keys[:limit]:
            count = refs.get(key)
            if count is None:
                break
            n += 1
            unreferenced += count == 0
        return n, unreferenced

    def reference(self, keys: Sequence[int]) -> int:
        """Reference ``keys`` (cached or new: a new one is inserted); return how many
        were not referenced before (new or revived): the blocks whose KV is now held."""
        refs, lru = self._refs, self._lru
        taken = 0
        for key in keys:
            count = refs.get(key)
            if count is None:
                refs[key] = 1
                taken += 1
            else:
                if count == 0:
                    del lru[key]
                    self.revived += 1
                    taken += 1
                refs[key] = count + 1
        self.cached_tokens = len(lru) * self.block_size
        return taken

    def release(self, keys: Sequence[int]) -> int:
        """Drop one reference to each of ``keys``; return how many became unreferenced
        (their KV is no longer held, only cached: the newest in the LRU order)."""
        refs, lru = self._refs, self._lru
        freed = 0
        for key in reversed(keys):  # a prompt's tail goes first when evicted
            count = refs[key] - 1
            refs[key] = count
            if count == 0:
                lru[key] = None
                freed += 1
        self.cached_tokens = len(lru) * self.block_size
        return freed

    def fit(self, free_tokens: int) -> None:
        """Evict the least recently used unreferenced blocks until the cached ones fit
        in ``free_tokens`` (and ``max_cached_tokens``)."""
        keep = max(free_tokens, 0) // self.block_size
        if self.max_cached_blocks is not None and self.max_cached_blocks < keep:
            keep = self.max_cached_blocks
        lru, refs = self._lru, self._refs
        while len(lru) > keep:
            key, _ = lru.popitem(last=False)
            del refs[key]
            self.evictions += 1
        self.cached_tokens = len(lru) * self.block_size


def cacheable_blocks(prompt_tokens: int, target: int, n_ids: int, block_size: int) -> int:
    """Whole blocks of a prompt a lookup may serve: full blocks only, and at least one
    token of the prefill ``target`` is always computed (it emits the first token)."""
    return min(n_ids, prompt_tokens // block_size, (target - 1) // block_size)


def unbounded_hit_tokens(requests: Sequence[object], block_size: int = 512) -> tuple[int, int]:
    """(prompt tokens an unbounded cache serves, prompt tokens) over ``requests`` in
    arrival order, by the engine's rules (whole blocks, one token always computed;
    each request's full blocks cached once it has been seen): the reference the
    engine's ``prefix_hit_share`` meets when nothing is evicted and no two requests
    sharing a prefix overlap in time."""
    seen: set[int] = set()
    hit = total = 0
    for req in requests:
        prompt = req.prompt_tokens  # type: ignore[attr-defined]
        ids = req.block_ids  # type: ignore[attr-defined]
        total += prompt
        full = min(len(ids), prompt // block_size)
        keys = chain_keys(ids, full)
        limit = cacheable_blocks(prompt, prompt, len(ids), block_size)
        n = 0
        for key in keys[:limit]:
            if key not in seen:
                break
            n += 1
        hit += n * block_size
        seen.update(keys)
    return hit, total
