"""Which ``(n_decode, chunk, ctx, prefix)`` points to time, and in what order.

A grid gives values per axis; the design is every valid combination, with ``ctx``
collapsed to 0 when nothing decodes and ``prefix`` to 0 when nothing prefills (it
does not matter then). Points are visited coarse-to-fine: each axis value gets a
*level* from recursive bisection of its value list (ends 0, middle 1, quarters 2,
...), a point's level is the largest of its axes', and levels run in order with
the points inside one level shuffled by a seeded generator. A run stopped by its
budget has therefore covered the whole space at the resolution it reached, and
slow drifts (heat, clocks) do not line up with any axis.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servecal.profiler.files import load_mapping
from servecal.util.errors import InputError

AXES = ("n_decode", "chunk", "ctx", "prefix")


@dataclass(frozen=True, order=True)
class Point:
    """One iteration shape to time."""

    n_decode: int
    chunk: int
    ctx: int
    prefix: int

    def __post_init__(self) -> None:
        if min(self.n_decode, self.chunk, self.ctx, self.prefix) < 0:
            raise ValueError(f"point values must be >= 0: {self}")
        if self.n_decode + self.chunk < 1:
            raise ValueError(f"a point needs n_decode + chunk >= 1: {self}")

    def label(self) -> str:
        return f"n={self.n_decode} c={self.chunk} ctx={self.ctx} prefix={self.prefix}"


#: Largest value of any grid axis: 2**24 tokens (16M; no model's context is longer).
MAX_AXIS_VALUE = 2**24
#: Most points a grid may span (a calibration measures each; an import composes each).
MAX_GRID_POINTS = 200_000


@dataclass(frozen=True)
class Grid:
    """Values per axis (each sorted, unique, >= 0)."""

    n_decode: tuple[int, ...]
    chunk: tuple[int, ...]
    ctx: tuple[int, ...]
    prefix: tuple[int, ...]

    def __post_init__(self) -> None:
        for axis in AXES:
            values = getattr(self, axis)
            if not values:
                raise ValueError(f"grid axis {axis} is empty")
            if any(not isinstance(v, int) or isinstance(v, bool) or v < 0 for v in values):
                raise ValueError(f"grid axis {axis} must hold integers >= 0, got {list(values)}")
            if max(values) > MAX_AXIS_VALUE:
                raise ValueError(
                    f"grid axis {axis}: {max(values):,} is beyond any model's context "
                    f"(at most {MAX_AXIS_VALUE:,})"
                )
            object.__setattr__(self, axis, tuple(sorted(set(values))))
        if max(self.n_decode) + max(self.chunk) < 1:
            raise ValueError("grid has no point with n_decode + chunk >= 1")
        points = math.prod(len(getattr(self, a)) for a in AXES)
        if points > MAX_GRID_POINTS:
            raise ValueError(
                f"grid of {points:,} points (the product of its axes): at most "
                f"{MAX_GRID_POINTS:,}; a table needs far fewer (docs/profiler.md)"
            )

    def to_dict(self) -> dict[str, list[int]]:
        return {k: list(v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "grid") -> Grid:
        unknown = sorted(set(data) - set(AXES))
        missing = [a for a in AXES if a not in data]
        if unknown or missing:
            raise InputError(
                f"{source}: grid needs exactly the keys {', '.join(AXES)}"
                + (f"; unknown {', '.join(unknown)}" if unknown else "")
                + (f"; missing {', '.join(missing)}" if missing else "")
            )
        try:
            return cls(**{a: tuple(data[a]) for a in AXES})
        except (TypeError, ValueError) as exc:
            raise InputError(f"{source}: {exc}") from None

    @classmethod
    def from_file(cls, path: str | Path) -> Grid:
        """A JSON or TOML file with one list of integers per axis."""
        path = Path(path)
        data = load_mapping(path, "grid")
        return cls.from_dict(data, str(path))


# Small on CPU so the `tiny` model's iterations stay ~2-20 ms on one core (170
# points × 23 iterations then fit a 90 s budget on an idle host); GPU grids reach
# serving sizes.
CPU_GRID = Grid(
    n_decode=(0, 1, 2, 4, 8, 16, 32),
    chunk=(0, 16, 32, 64, 128),
    ctx=(64, 256, 512),
    prefix=(0, 256),
)
GPU_GRID = Grid(
    n_decode=(0, 1, 2, 4, 8, 16, 32, 64, 128, 256),
    chunk=(0, 16, 64, 128, 256, 512, 1024, 2048, 4096),
    ctx=(128, 512, 1024, 2048, 4096, 8192),
    prefix=(0, 1024, 4096),
)

# Importers compose rather than time, so their default grid costs nothing to widen: it
# reaches the 8k and 16k prompts that serving traces carry (a table answers a query past
# its last chunk with the last chunk's price).
IMPORT_GRID = Grid(
    n_decode=GPU_GRID.n_decode,
    chunk=(*GPU_GRID.chunk, 8192, 16384),
    ctx=GPU_GRID.ctx,
    prefix=GPU_GRID.prefix,
)


def default_grid(device_type: str) -> Grid:
    return GPU_GRID if device_type == "cuda" else CPU_GRID


def bisection_levels(count: int) -> list[int]:
    """Level of each index of a sorted axis of ``count`` values (ends 0, middle 1, ...)."""
    levels = [-1] * count
    if count == 0:
        return levels
    levels[0] = levels[-1] = 0
    frontier = [(0, count - 1)]
    level = 1
    while frontier:
        nxt = []
        for lo, hi in frontier:
            if hi - lo < 2:
                continue
            mid = (lo + hi) // 2
            levels[mid] = level
            nxt += [(lo, mid), (mid, hi)]
        frontier = nxt
        level += 1
    return levels


def design_points(grid: Grid, rng: np.random.Generator) -> list[Point]:
    """Every valid point of ``grid`` once, in coarse-to-fine order, shuffled within a level."""
    level_of = {
        a: dict(zip(getattr(grid, a), bisection_levels(len(getattr(grid, a))), strict=True))
        for a in AXES
    }
    best: dict[Point, int] = {}
    for n, c, ctx, p in itertools.product(grid.n_decode, grid.chunk, grid.ctx, grid.prefix):
        if n + c < 1:
            continue
        level = max(
            level_of["n_decode"][n],
            level_of["chunk"][c],
            level_of["ctx"][ctx],
            level_of["prefix"][p],
        )
        point = Point(n, c, ctx if n else 0, p if c else 0)
        # A collapsed point keeps the coarsest level any of its grid combinations had.
        best[point] = min(level, best.get(point, level))
    by_level: dict[int, list[Point]] = {}
    for point, level in sorted(best.items()):
        by_level.setdefault(level, []).append(point)
    order: list[Point] = []
    for level in sorted(by_level):
        group = by_level[level]
        order += [group[i] for i in rng.permutation(len(group))]
    return order
