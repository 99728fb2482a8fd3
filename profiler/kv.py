"""Real KV-cache storage and the description of one iteration's batch.

A :class:`KVPool` holds K and V for ``slots`` sequences of up to ``capacity``
tokens, one tensor pair per layer, laid out ``[layers, slots, kv_heads, capacity,
head_dim]`` so that a layer's view of a run of slots is a plain slice (no copy).
An :class:`IterationBatch` says which slots decode this iteration (each one new
token after its own ``lengths[i]`` cached tokens) and which prefill segments run
(``chunk`` new prompt tokens after ``prefix`` cached ones). The model writes the
new K/V into the pools; :meth:`IterationBatch.advance` moves decode lengths on
when a caller (an executor; not the profiler, which re-times one point) commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from servecal.profiler.shapes import ModelShape


class KVPool:
    """K/V tensors for ``slots`` sequences × ``capacity`` tokens × ``n_layers`` layers."""

    def __init__(
        self,
        shape: ModelShape,
        n_layers: int,
        slots: int,
        capacity: int,
        device: torch.device | str,
        dtype: torch.dtype,
        fill: bool = True,
    ) -> None:
        if n_layers < 1 or slots < 1 or capacity < 1:
            raise ValueError("KVPool needs n_layers, slots and capacity >= 1")
        size = (n_layers, slots, shape.n_kv_heads, capacity, shape.head_dim)
        self.k = torch.empty(size, device=device, dtype=dtype)
        self.v = torch.empty(size, device=device, dtype=dtype)
        if fill:
            # Uninitialised memory can hold NaNs/denormals that take slow paths on CPU.
            self.k.normal_()
            self.v.normal_()
        self.capacity = capacity
        self.slots = slots

    @property
    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()


@dataclass
class DecodeGroup:
    """Decoding sequences: ``slots`` of ``pool``, with ``lengths[i]`` tokens already cached."""

    pool: KVPool
    slots: Sequence[int]
    lengths: Sequence[int]

    def __post_init__(self) -> None:
        if len(self.slots) != len(self.lengths) or not self.slots:
            raise ValueError("DecodeGroup needs one length per slot and at least one slot")
        if min(self.lengths) < 0 or max(self.lengths) + 1 > self.pool.capacity:
            raise ValueError("DecodeGroup length out of range for the pool's capacity")

    @property
    def n(self) -> int:
        return len(self.slots)

    @property
    def contiguous(self) -> slice | None:
        """The slots as a slice when they are a consecutive run (the no-copy path)."""
        first = self.slots[0]
        if list(self.slots) == list(range(first, first + len(self.slots))):
            return slice(first, first + len(self.slots))
        return None

    @property
    def uniform(self) -> bool:
        return min(self.lengths) == max(self.lengths)


@dataclass
class PrefillSegment:
    """``chunk`` prompt tokens of the sequence in ``slot``, after ``prefix`` cached ones."""

    pool: KVPool
    slot: int
    prefix: int
    chunk: int

    def __post_init__(self) -> None:
        if self.chunk < 1 or self.prefix < 0:
            raise ValueError("PrefillSegment needs chunk >= 1 and prefix >= 0")
        if self.prefix + self.chunk > self.pool.capacity:
            raise ValueError("PrefillSegment does not fit the pool's capacity")


@dataclass
class IterationBatch:
    """One iteration: an optional decode group and any number of prefill segments.

    Token order in the forward pass: the decode tokens (in slot order), then each
    segment's chunk in list order.
    """

    decode: DecodeGroup | None = None
    prefills: list[PrefillSegment] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.decode is None and not self.prefills:
            raise ValueError("an iteration needs at least one decode or prefill token")

    @property
    def n_decode(self) -> int:
        return 0 if self.decode is None else self.decode.n

    @property
    def n_tokens(self) -> int:
        return self.n_decode + sum(p.chunk for p in self.prefills)

    @property
    def n_logits(self) -> int:
        """Positions whose logits are computed: each decode token and each segment's last."""
        return self.n_decode + len(self.prefills)

    def positions(self, device: torch.device | str) -> torch.Tensor:
        parts = []
        if self.decode is not None:
            parts.append(torch.tensor(list(self.decode.lengths), dtype=torch.long))
        for p in self.prefills:
            parts.append(torch.arange(p.prefix, p.prefix + p.chunk, dtype=torch.long))
        return torch.cat(parts).to(device)

    def advance(self) -> None:
        """Commit the decode step: each decoding sequence holds one more cached token.

        Prefill progress is the caller's to track: the next segment of a prompt is a
        new :class:`PrefillSegment` with ``prefix`` moved on by this ``chunk``.
        """
        if self.decode is not None:
            self.decode.lengths = [n + 1 for n in self.decode.lengths]
