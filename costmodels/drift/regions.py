"""Regions of the (n_decode, chunk) plane that drift is attributed to.

A cost table is usually wrong somewhere, not everywhere: a new attention kernel
slows long prefills, a driver change slows small decode batches. Buckets are
half-open ranges on each axis, roughly logarithmic; bucket 0 of each axis is
exactly 0 (no decodes / no prefill), because those iterations run different
kernels.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike


@dataclass(frozen=True)
class RegionGrid:
    """Bucket edges: bucket ``i`` of an axis is ``[edges[i-1], edges[i])``, bucket 0 is 0."""

    n_edges: tuple[int, ...] = (1, 8, 32, 128)
    c_edges: tuple[int, ...] = (1, 256, 1024)

    def __post_init__(self) -> None:
        for name in ("n_edges", "c_edges"):
            e = getattr(self, name)
            if not e or e[0] != 1 or any(b <= a for a, b in zip(e, e[1:], strict=False)):
                raise ValueError(f"RegionGrid.{name} must start at 1 and increase strictly")

    @property
    def n_buckets(self) -> int:
        return len(self.n_edges) + 1

    @property
    def c_buckets(self) -> int:
        return len(self.c_edges) + 1

    @property
    def size(self) -> int:
        return self.n_buckets * self.c_buckets

    def n_bucket(self, n_decode: int) -> int:
        return bisect.bisect_right(self.n_edges, n_decode)

    def c_bucket(self, chunk: int) -> int:
        return bisect.bisect_right(self.c_edges, chunk)

    def index(self, n_decode: int, chunk: int) -> int:
        """Flat region index of one iteration."""
        return self.n_bucket(n_decode) * self.c_buckets + self.c_bucket(chunk)

    def indices(self, n_decode: ArrayLike, chunk: ArrayLike) -> np.ndarray:
        """Flat region indices, vectorised."""
        nb = np.searchsorted(self.n_edges, np.asarray(n_decode), side="right")
        cb = np.searchsorted(self.c_edges, np.asarray(chunk), side="right")
        return nb * self.c_buckets + cb

    def c_range(self, c_bucket: int) -> tuple[int, int | None]:
        """Inclusive chunk range ``(lo, hi)`` of a chunk bucket; ``hi`` None = unbounded."""
        return _range(self.c_edges, c_bucket)

    def describe(self, region: int) -> dict[str, object]:
        """Label and ranges of a flat region index."""
        nb, cb = divmod(int(region), self.c_buckets)
        n_lo, n_hi = _range(self.n_edges, nb)
        c_lo, c_hi = _range(self.c_edges, cb)
        return {
            "region": f"n_decode {_fmt(n_lo, n_hi)}, chunk {_fmt(c_lo, c_hi)}",
            "n_decode": [n_lo, n_hi],
            "chunk": [c_lo, c_hi],
        }


def _range(edges: tuple[int, ...], bucket: int) -> tuple[int, int | None]:
    if bucket == 0:
        return 0, 0
    lo = edges[bucket - 1]
    hi = edges[bucket] - 1 if bucket < len(edges) else None
    return lo, hi


def _fmt(lo: int, hi: int | None) -> str:
    if hi is None:
        return f"{lo}+"
    return str(lo) if lo == hi else f"{lo}-{hi}"
