"""A paged KV pool: ``M`` tokens of K/V in fixed-size blocks, handed out per request.

Physical storage is one K and one V tensor per pool, ``[layers, kv_heads, blocks,
block_size, head_dim]``: a token's K/V lives at a *flat slot* ``block × block_size +
offset`` of the ``blocks × block_size`` axis. Each request owns a list of blocks
(its block table); it grows one block at a time as the request's KV grows and goes
back to the free list as a whole on completion or recompute preemption. Attention
gathers a request's *blocks* through its table (``index_select`` of whole
``block_size × head_dim`` rows, then a free reshape to ``[kv_heads, tokens,
head_dim]``), so requests never need contiguous memory — vLLM's PagedAttention
layout, gathered by torch instead of read in place by a fused kernel. A decode
group's gather is kept per layer (:class:`DecodeView`) and appended to while the
same group keeps decoding, so steady decoding does not copy every block again.

The engine keeps the tokens held by all requests ``≤ M``; blocks round each
request up to a multiple of ``block_size``, so the pool adds one spare block per
request it may hold at once (``max_seqs``) and refuses (``PoolExhausted``) rather
than ever handing out a block twice or beyond its storage.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from servecal.profiler.shapes import ModelShape


class PoolExhausted(RuntimeError):
    """The pool has no free block for a request that needs one."""


@dataclass(frozen=True)
class PoolConfig:
    """``capacity_tokens``: ``M``; ``block_size``: tokens per block; ``max_seqs``: requests
    that may hold KV at once (one spare block each for their partly filled last block)."""

    capacity_tokens: int
    block_size: int = 16
    max_seqs: int = 256

    def __post_init__(self) -> None:
        if self.capacity_tokens < 1:
            raise ValueError(f"capacity_tokens must be >= 1, got {self.capacity_tokens}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        if self.max_seqs < 1:
            raise ValueError(f"max_seqs must be >= 1, got {self.max_seqs}")

    @property
    def n_blocks(self) -> int:
        return math.ceil(self.capacity_tokens / self.block_size) + self.max_seqs


#: Cost of one extra attention call, in key rows (one request's key at one position):
#: about 35 µs of call overhead against 0.09 µs per key row for ``tiny`` on one CPU
#: thread (measured with per-request against batched ``sdpa`` calls on this repository's host).
BUCKET_CALL_KEYS = 384


def length_buckets(
    lengths: list[int], call_keys: int = BUCKET_CALL_KEYS
) -> list[tuple[int, int, int]]:
    """Split decode rows into contiguous runs ``(start, stop, width)`` for attention.

    Each run is padded to its widest row (``width`` keys), so it costs
    ``(stop − start) × width`` key rows plus ``call_keys`` for the call itself; the
    split minimises the total exactly (dynamic programming over the row order).
    Rows sorted longest first (as the executor orders them) make the runs tight.
    """
    n = len(lengths)
    best = [0.0] + [float("inf")] * n
    cut = [0] * (n + 1)
    for stop in range(1, n + 1):
        widest = 0
        for start in range(stop - 1, -1, -1):
            widest = max(widest, lengths[start])
            cost = best[start] + (stop - start) * widest + call_keys
            if cost < best[stop]:
                best[stop], cut[stop] = cost, start
    runs = []
    stop = n
    while stop > 0:
        start = cut[stop]
        runs.append((start, stop, max(lengths[start:stop])))
        stop = start
    return runs[::-1]


@dataclass
class DecodeView:
    """One layer's K/V of a decode group, contiguous ``[n, kv_heads, capacity, head_dim]``.

    Row ``i`` holds positions ``0..lengths[i]-1`` of request ``rids[i]`` (the pool's
    blocks, copied once); while the next iteration decodes the same requests at
    those lengths, only its new token is appended (as a paged-attention kernel
    reads the blocks in place) instead of re-gathering every block of every layer.
    When the group changes, rows of requests that stay are copied into the next
    view and only newcomers are gathered (``forward.rebuild_view``); a freed
    request's row is voided (its rid becomes −1), never carried.
    """

    rids: tuple[int, ...]
    lengths: list[int]
    k: torch.Tensor
    v: torch.Tensor
    parity: int = 0  # which of the layer's two buffers holds it (the next rebuild uses the other)

    def matches(self, rids: tuple[int, ...], lengths: list[int], width: int) -> bool:
        return self.rids == rids and self.lengths == lengths and self.k.shape[2] >= width


#: Growth of a reusable buffer that is too small: by half again at least. Decode
#: views widen a block at a time as requests grow; an exact-size buffer would be
#: allocated (and zero-filled, page by page) again at nearly every group change, at
#: several times the cost of the copy itself.
BUFFER_GROWTH = 1.5


def _grown(buf: torch.Tensor | None, numel: int) -> int:
    """Elements to allocate for a buffer that must hold ``numel`` (``buf``: the old one)."""
    if buf is None:
        return max(numel, 1)
    return max(numel, math.ceil(buf.numel() * BUFFER_GROWTH))


class PagedKVPool:
    """Blocks of K/V storage for ``n_layers`` layers of ``shape`` (see module doc)."""

    def __init__(
        self,
        shape: ModelShape,
        n_layers: int,
        config: PoolConfig,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if n_layers < 1:
            raise ValueError(f"n_layers must be >= 1, got {n_layers}")
        self.config = config
        self.block_size = config.block_size
        self.n_blocks = config.n_blocks
        size = (n_layers, shape.n_kv_heads, self.n_blocks, self.block_size, shape.head_dim)
        # Zeros, not empty(): padded positions are masked out of attention, but a NaN
        # in uninitialised memory would still poison the softmax-weighted sum (0 · NaN).
        self.k = torch.zeros(size, device=device, dtype=dtype)
        self.v = torch.zeros(size, device=device, dtype=dtype)
        # Scratch for gathered K/V, reused across layers and iterations: a fresh
        # multi-MB tensor per gather goes back to the OS on free and page-faults in
        # again on the next one, which costs more than the copy itself.
        self._scratch: dict[str, torch.Tensor] = {}
        # Per layer, the last decode group's K/V as one contiguous working copy
        # (see :class:`DecodeView`); dropped when one of its requests is freed.
        self.decode_views: dict[int, DecodeView] = {}
        self._buckets: tuple[tuple[int, ...], list[tuple[int, int, int]]] | None = None
        self.bucket_call_keys = BUCKET_CALL_KEYS  # the split's price of one more call
        self._views_storage: dict[str, torch.Tensor] = {}  # reused like the scratch
        self._free = list(range(self.n_blocks - 1, -1, -1))  # pop() hands out block 0 first
        self._tables: dict[int, list[int]] = {}
        self._tokens: dict[int, int] = {}
        self._used_tokens = 0
        self.peak_blocks = 0
        self.peak_tokens = 0

    # -- allocation ---------------------------------------------------------------------
    def reserve(self, rid: int, tokens: int) -> None:
        """Make request ``rid``'s blocks hold at least ``tokens`` tokens (allocating blocks)."""
        table = self._tables.setdefault(rid, [])
        need = math.ceil(tokens / self.block_size) - len(table)
        if need > len(self._free):
            raise PoolExhausted(
                f"request {rid} needs {need} more KV blocks, {len(self._free)} free "
                f"of {self.n_blocks} (block {self.block_size} tokens)"
            )
        for _ in range(need):
            table.append(self._free.pop())
        self.peak_blocks = max(self.peak_blocks, self.used_blocks)

    def commit(self, rid: int, tokens: int) -> None:
        """Request ``rid`` now holds ``tokens`` cached tokens (within its reserved blocks)."""
        if tokens > len(self._tables.get(rid, ())) * self.block_size:
            raise ValueError(f"request {rid}: {tokens} tokens exceed its reserved blocks")
        self._used_tokens += tokens - self._tokens.get(rid, 0)
        self._tokens[rid] = tokens
        self.peak_tokens = max(self.peak_tokens, self._used_tokens)

    def free(self, rid: int) -> int:
        """Return every block of ``rid`` to the pool; the tokens it held (0 if none)."""
        self._free.extend(self._tables.pop(rid, ()))
        for view in self.decode_views.values():  # its blocks may be reused: its row is void
            if rid in view.rids:
                view.rids = tuple(-1 if r == rid else r for r in view.rids)
        held = self._tokens.pop(rid, 0)
        self._used_tokens -= held
        return held

    def cached_buckets(
        self, rids: tuple[int, ...], lengths: list[int]
    ) -> list[tuple[int, int, int]]:
        """:func:`length_buckets` of a decode group, split once per group: while the same
        requests decode (each one token longer per step) the split is kept and only the
        widths move."""
        if self._buckets is None or self._buckets[0] != rids:
            self._buckets = (rids, length_buckets(lengths, self.bucket_call_keys))
            return self._buckets[1]
        return [(a, b, max(lengths[a:b])) for a, b, _ in self._buckets[1]]

    def scratch(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        """A reusable buffer of ``shape`` (grown, never shrunk) for gathers into ``name``."""
        return self._reused(self._scratch, name, shape, torch.empty)

    def view_buffer(
        self, kind: str, layer: int, parity: int, shape: tuple[int, ...]
    ) -> torch.Tensor:
        """Storage of ``shape`` for one of a layer's two :class:`DecodeView` buffers
        (``kind`` ``"k"`` or ``"v"``). Like :meth:`scratch`, but zero-filled when grown
        (positions past a row's length are masked, but 0 · NaN would still poison the
        sum), and afterwards holding only finite K/V copied from the pool."""
        return self._reused(self._views_storage, f"{kind}{layer}.{parity}", shape, torch.zeros)

    def _reused(
        self,
        store: dict[str, torch.Tensor],
        name: str,
        shape: tuple[int, ...],
        make: Callable[..., torch.Tensor],
    ) -> torch.Tensor:
        """``store[name]`` viewed as ``shape``; made anew by ``make`` (grown by half at
        least, :func:`_grown`) when it is missing or too small."""
        numel = math.prod(shape)
        buf = store.get(name)
        if buf is None or buf.numel() < numel:
            buf = make(_grown(buf, numel), device=self.k.device, dtype=self.k.dtype)
            store[name] = buf
        return buf[:numel].view(shape)

    def presize_views(self, rows: int, keys: int) -> None:
        """Grow every layer's view buffers to hold ``rows × keys`` positions now (as a
        long run's buffers already have), not at the first group changes."""
        heads, hd = self.k.shape[1], self.k.shape[-1]
        for layer in range(self.k.shape[0]):
            for parity in (0, 1):
                for kind in ("k", "v"):
                    self.view_buffer(kind, layer, parity, (rows, heads, keys, hd))

    # -- reading ------------------------------------------------------------------------
    def tokens(self, rid: int) -> int:
        """Cached tokens of ``rid`` (0 if it holds none)."""
        return self._tokens.get(rid, 0)

    def holders(self) -> list[int]:
        """Requests holding blocks."""
        return list(self._tables)

    def table(self, rid: int) -> tuple[int, ...]:
        return tuple(self._tables.get(rid, ()))

    @property
    def used_blocks(self) -> int:
        return self.n_blocks - len(self._free)

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    @property
    def used_tokens(self) -> int:
        return self._used_tokens

    def slots(self, rid: int, start: int, stop: int) -> list[int]:
        """Flat slots of ``rid``'s token positions ``start..stop-1`` (within its blocks)."""
        table, bs = self._tables[rid], self.block_size
        if stop > len(table) * bs:
            raise ValueError(f"request {rid}: position {stop - 1} is beyond its blocks")
        return [table[p // bs] * bs + p % bs for p in range(start, stop)]

    def padded_blocks(self, rids: list[int], lengths: list[int]) -> tuple[torch.Tensor, int]:
        """Block ids covering positions ``0..lengths[i]-1`` of each request, padded to the
        widest with the request's first block (attention masks the padding out), as one
        flat ``[len(rids) × width]`` tensor; and ``width`` in blocks."""
        bs = self.block_size
        need = [max(1, -(-n // bs)) for n in lengths]
        width = max(need)
        flat: list[int] = []
        for rid, k in zip(rids, need, strict=True):
            table = self._tables[rid]
            if k > len(table):
                raise ValueError(f"request {rid}: {k} blocks needed, {len(table)} reserved")
            flat += table[:k] + [table[0]] * (width - k)
        return torch.tensor(flat, dtype=torch.long, device=self.k.device), width
