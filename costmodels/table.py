"""The cost table: a monotone grid of iteration-time quantiles with a conformal margin.

This is what a server loads (``CostTable.load``) and what the engine asks every
iteration, so it imports only the standard library and numpy, and scalar queries run
in plain Python (``bisect`` on lists, flat index arithmetic): no numpy per call.

Grid: axes ``n_decode, ctx, prefix, chunk`` (chunk last, so a ``max_chunk`` row is
contiguous); values are stored flat in C order over that axis order.

* between grid points (``between``): **linear**, multilinear interpolation of the
  box's corners (:mod:`interp`; monotone like the grid, the default for fitted
  tables), or **round up** to the next grid point on every axis (over-predicts by
  up to the grid's spacing: conservative, the rule of tables written before 0.2);
* beyond the grid: **clamp** to the edge and count the query in ``out_of_domain``.

Margin: ``δ(x) = rho · P_tail(x)`` (a relative split-conformal margin, see
docs/costtable.md), so ``P_tail + δ`` is the calibrated upper bound.
"""

from __future__ import annotations

import json
import math
import os
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from servecal.costmodels.chunk_search import (
    LINE_SLACK,
    PREMADE_N_DECODE,
    ChunkSearch,
    NSides,
    blend_column,
    keep_bounded,
    settle,
)
from servecal.costmodels.interp import (
    BlendedGrid,
    Multilinear,
    axis_position,
    corner_value,
)
from servecal.costmodels.jsontext import DuplicateKeyError, loads_unique
from servecal.costmodels.predictor import PLAN_QUANTILE
from servecal.costmodels.provenance import (
    FINGERPRINT_KEYS,
    FingerprintMismatchWarning,  # noqa: F401 - re-exported: where it always lived
    check_content_hash,
    check_hash_present,
    compare_fingerprints,
    content_hash,
    fingerprint_diff,  # noqa: F401 - re-exported
)
from servecal.util.atomic import atomic_write_bytes
from servecal.util.errors import InputError

COSTTABLE_SCHEMA = "servecal.costtable/1"
#: Storage order of the grid axes (chunk last: one max_chunk row is contiguous).
AXES = ("n_decode", "ctx", "prefix", "chunk")
#: Rules for queries between grid values (``between``); the first is the default.
BETWEEN_RULES = ("linear", "round_up")
BEYOND_RULE = "clamp"
#: Fingerprint keys that identify the device and model a table is valid for (what
#: ``load(fingerprint=...)`` compares, where both sides have them); run details
#: (date, points, versions of servecal) are not part of the identity.
IDENTITY_KEYS = FINGERPRINT_KEYS

_SCALAR_TYPES = (int, float, np.integer, np.floating)


class MissingQuantileError(InputError):
    """The table cannot answer this quantile (e.g. fitted from medians only: no P99)."""


@dataclass(frozen=True)
class Margin:
    """Split-conformal margin ``δ = rho · P_quantile`` and how it was validated."""

    quantile: float
    rho: float
    target: float
    validated_coverage: float | None
    calibration_points: int
    calibration_rows: int
    score: str = "ms / p_tail - 1"

    def __post_init__(self) -> None:
        if not 0.0 < self.quantile < 1.0 or not 0.0 < self.target < 1.0:
            raise ValueError("margin quantile and target must be in (0, 1)")
        if not math.isfinite(self.rho) or self.rho <= -1.0:
            raise ValueError(f"margin rho must be finite and > -1, got {self.rho}")
        if self.calibration_points < 1 or self.calibration_rows < 1:
            raise ValueError("margin needs at least one calibration point and row")


_PY_SCALARS = frozenset({int, float})


def _scalar_kind(a: Any, b: Any, c: Any, d: Any) -> int:
    """1: all plain Python numbers (the engine's hot path); 2: scalars incl. numpy; 0: arrays."""
    py = _PY_SCALARS
    if type(a) in py and type(b) in py and type(c) in py and type(d) in py:
        return 1
    return 2 if all(isinstance(x, _SCALAR_TYPES) for x in (a, b, c, d)) else 0


def _plain(*xs: Any) -> tuple[int | float, ...]:
    """numpy scalars compare slowly inside bisect: turn them into Python numbers."""
    return tuple(x if type(x) in _PY_SCALARS else x.item() for x in xs)


class CostTable:
    """Monotone quantile grid with margin, energy and provenance (see module docstring)."""

    def __init__(
        self,
        axes: Mapping[str, Sequence[int]],
        quantiles: Mapping[float, ArrayLike],
        margin: Margin | None = None,
        energy_j: ArrayLike | None = None,
        fingerprint: Mapping[str, Any] | None = None,
        model: Mapping[str, Any] | None = None,
        validation: Mapping[str, Any] | None = None,
        created: str | None = None,
        between: str = BETWEEN_RULES[0],
        tp: int | None = None,
    ) -> None:
        if between not in BETWEEN_RULES:
            raise ValueError(f"between must be one of {BETWEEN_RULES}, got {between!r}")
        self._between = between
        if set(axes) != set(AXES):
            raise ValueError(f"axes must be exactly {AXES}, got {sorted(axes)}")
        self._axes = tuple(tuple(int(v) for v in axes[a]) for a in AXES)
        for name, vals in zip(AXES, self._axes, strict=True):
            if not vals or any(b <= a for a, b in zip(vals, vals[1:], strict=False)):
                raise ValueError(f"axis '{name}' must be non-empty and strictly increasing")
        self._shape = tuple(len(v) for v in self._axes)
        size = math.prod(self._shape)
        if not quantiles:
            raise ValueError("a cost table needs at least one quantile")
        self._q: dict[float, np.ndarray] = {}
        for q in sorted(quantiles):
            if not 0.0 < float(q) < 1.0:
                raise ValueError(f"quantile must be in (0, 1), got {q}")
            arr = np.asarray(quantiles[q], dtype=float).reshape(-1)
            if arr.size != size or not np.isfinite(arr).all() or (arr < 0).any():
                raise ValueError(f"quantile {q}: need {size} finite values >= 0")
            self._q[float(q)] = arr.reshape(self._shape)
        if margin is not None and margin.quantile not in self._q:
            raise ValueError(f"margin quantile {margin.quantile} is not a table quantile")
        self._margin = margin
        self._energy = None
        if energy_j is not None:
            e = np.asarray(energy_j, dtype=float).reshape(-1)
            if e.size != size or not np.isfinite(e).all() or (e < 0).any():
                raise ValueError(f"energy_j: need {size} finite values >= 0")
            self._energy = e.reshape(self._shape)
        self._fingerprint = dict(fingerprint or {})
        # Tensor-parallel degree of the deployment the times are for (default: the
        # samples' provenance says; tables and samples from before TP are TP 1).
        tp = self._fingerprint.get("tp", 1) if tp is None else tp
        if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
            raise ValueError(f"tp must be an integer >= 1, got {tp!r}")
        self._tp = tp
        self._model = dict(model or {})
        self._validation = dict(validation or {})
        self._created = created
        self._check_monotone()
        self._prepare_fast_path()
        self._out_of_domain = 0
        self._beyond = dict.fromkeys(AXES, 0)

    # ------------------------------------------------------------------ checks
    def _check_monotone(self) -> None:
        arrays = dict(self._q)
        if self._energy is not None:
            arrays["energy_j"] = self._energy  # type: ignore[index]
        for key, arr in arrays.items():
            for axis, name in enumerate(AXES):
                bad = np.argwhere(np.diff(arr, axis=axis) < 0)
                if bad.size:
                    cell = {
                        a: self._axes[k][int(i)]
                        for k, (a, i) in enumerate(zip(AXES, bad[0], strict=True))
                    }
                    label = key if key == "energy_j" else f"quantile {key}"
                    raise ValueError(f"{label} decreases along '{name}' after cell {cell}")
        qs = list(self._q)
        for lo, hi in zip(qs, qs[1:], strict=False):
            if (self._q[hi] < self._q[lo]).any():
                raise ValueError(f"quantile {hi} lies below quantile {lo} somewhere")

    def _prepare_fast_path(self) -> None:
        """Python lists for the scalar path (bisect + flat index, no numpy per call)."""
        self._ax_lists = [list(v) for v in self._axes]
        self._fast = (*self._ax_lists, *self._shape)  # unpacked once per scalar call
        self._ax_arrays = [np.asarray(v, dtype=float) for v in self._axes]
        self._flat = {q: arr.reshape(-1).tolist() for q, arr in self._q.items()}
        rho = self._margin.rho if self._margin else 0.0
        self._rho = rho
        tail = self._flat[self._margin.quantile] if self._margin else None
        # the margin is rho times the tail's answer (the same product at every cell)
        self._mflat = [rho * v for v in tail] if tail is not None else None
        self._eflat = self._energy.reshape(-1).tolist() if self._energy is not None else None
        self._row_cache: dict[tuple[float, bool, int], tuple[list[float], bool]] = {}
        self._lin = Multilinear(self._axes) if self._between == "linear" else None
        # the linear rule's scalar path: each flat grid with its blended-row cache
        blend = self._lin.grid if self._lin is not None else lambda values: None
        self._blend: dict[float, BlendedGrid | None] = {q: blend(v) for q, v in self._flat.items()}
        # max_chunk's straight-line search: the grids it can search (linear rule)
        grids: dict[tuple[float, bool], tuple[list[float], float]] = {}
        if self._lin is not None:
            grids = {(q, False): (values, 0.0) for q, values in self._flat.items()}
            if self._margin is not None:
                tail_q = self._margin.quantile
                grids[(tail_q, True)] = (self._flat[tail_q], rho)
        # (under round-up no grid is searchable; the search's look-ups go unused)
        self._search = ChunkSearch(self._lin or Multilinear(self._axes), grids)
        self._eblend = blend(self._eflat) if self._eflat is not None else None

    # -------------------------------------------------------------- properties
    @property
    def quantiles(self) -> tuple[float, ...]:
        """The quantiles the table answers, ascending."""
        return tuple(self._q)

    @property
    def between(self) -> str:
        """How queries between grid values are answered (:data:`BETWEEN_RULES`)."""
        return self._between

    @property
    def tail(self) -> float | None:
        """The quantile the margin is added to, or ``None`` (median-only table)."""
        return self._margin.quantile if self._margin else None

    @property
    def margin_info(self) -> Margin | None:
        return self._margin

    @property
    def tp(self) -> int:
        """Tensor-parallel degree the table's times are for (GPUs per model replica)."""
        return self._tp

    @property
    def fingerprint(self) -> dict[str, Any]:
        return dict(self._fingerprint)

    @property
    def model(self) -> dict[str, Any]:
        return dict(self._model)

    @property
    def validation(self) -> dict[str, Any]:
        return dict(self._validation)

    @property
    def axes(self) -> dict[str, tuple[int, ...]]:
        return dict(zip(AXES, self._axes, strict=True))

    @property
    def domain(self) -> dict[str, tuple[int, int]]:
        return {a: (v[0], v[-1]) for a, v in zip(AXES, self._axes, strict=True)}

    @property
    def has_energy(self) -> bool:
        return self._energy is not None

    @property
    def out_of_domain(self) -> int:
        """How many queries so far fell outside the grid and were clamped."""
        return self._out_of_domain

    @property
    def beyond_grid(self) -> dict[str, int]:
        """Per axis, how many counted queries lay beyond it (priced at its edge); a
        query beyond two axes counts on both, once in :attr:`out_of_domain`."""
        return dict(self._beyond)

    def _count_beyond(self, n: float, ctx: float, prefix: float, chunk: float) -> None:
        """Count one clamped query, in total and on each axis it lies beyond (called
        only for clamped queries: the in-grid path pays nothing)."""
        self._out_of_domain += 1
        for name, axis, x in zip(AXES, self._ax_lists, (n, ctx, prefix, chunk), strict=True):
            if x < axis[0] or x > axis[-1]:
                self._beyond[name] += 1

    def _count_beyond_many(self, xs: Sequence[ArrayLike]) -> None:
        """:meth:`_count_beyond` for arrays of queries (n_decode, ctx, prefix, chunk)."""
        xs = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in xs))
        out = np.zeros(xs[0].shape, dtype=bool)
        for name, axis, x in zip(AXES, self._ax_lists, xs, strict=True):
            beyond = (x < axis[0]) | (x > axis[-1])
            self._beyond[name] += int(beyond.sum())
            out |= beyond
        self._out_of_domain += int(out.sum())

    def values(self, q: float) -> np.ndarray:
        """The ``q`` grid as an array of shape ``len(axis)`` for axes in :data:`AXES`."""
        return self._quantile_array(q).copy()

    def energy_values(self) -> np.ndarray | None:
        return None if self._energy is None else self._energy.copy()

    # -------------------------------------------------------------- indexing
    def _missing(self, q: float) -> MissingQuantileError:
        have = ", ".join(str(k) for k in self._q)
        if q > 0.5 and self._margin is None and len(self._q) == 1:
            return MissingQuantileError(
                f"cost table has no quantile {q}: it was fitted from medians only "
                f"(one row per point), so its tail cannot be learned; it answers {have}"
            )
        return MissingQuantileError(f"cost table has no quantile {q}; it answers {have}")

    def _no_margin(self) -> MissingQuantileError:
        return MissingQuantileError(
            "cost table has no calibrated margin (fitted from medians only, no tail); "
            "use use_margin=False with q=0.5, or refit on repeated measurements"
        )

    def _quantile_array(self, q: float) -> np.ndarray:
        try:
            return self._q[float(q)]
        except KeyError:
            raise self._missing(float(q)) from None

    def _index(self, n: float, ctx: float, prefix: float, chunk: float) -> int:
        """Flat index of the round-up cell; counts the query if it is clamped."""
        a0, a1, a2, a3, n0, n1, n2, n3 = self._fast
        i0 = bisect_left(a0, n)
        i1 = bisect_left(a1, ctx)
        i2 = bisect_left(a2, prefix)
        i3 = bisect_left(a3, chunk)
        if (
            i0 == n0
            or i1 == n1
            or i2 == n2
            or i3 == n3
            or n < a0[0]
            or ctx < a1[0]
            or prefix < a2[0]
            or chunk < a3[0]
        ):
            self._count_beyond(n, ctx, prefix, chunk)
            i0, i1, i2, i3 = min(i0, n0 - 1), min(i1, n1 - 1), min(i2, n2 - 1), min(i3, n3 - 1)
        return ((i0 * n1 + i1) * n2 + i2) * n3 + i3

    def cells(
        self, n_decode: ArrayLike, chunk: ArrayLike, ctx: ArrayLike = 0, prefix: ArrayLike = 0
    ) -> tuple[np.ndarray, np.ndarray]:
        """Flat round-up cell of each query and whether it lies outside the grid.

        Does not count the queries (for offline evaluation; see :meth:`values`).
        """
        xs = np.broadcast_arrays(
            *(np.asarray(x, dtype=float) for x in (n_decode, ctx, prefix, chunk))
        )
        flat = np.zeros(xs[0].shape, dtype=np.int64)
        out = np.zeros(xs[0].shape, dtype=bool)
        for x, ax in zip(xs, self._ax_arrays, strict=True):
            i = np.searchsorted(ax, x, side="left")
            out |= (x < ax[0]) | (x > ax[-1])
            flat = flat * ax.size + np.minimum(i, ax.size - 1)
        return flat, out

    def _linear(self, grid: BlendedGrid, n: float, ctx: float, prefix: float, c: float) -> float:
        """Scalar multilinear value of a grid; counts the query if clamped."""
        lin = self._lin
        corners = lin.corners(grid, n, ctx, prefix)
        k, t, out_c = axis_position(lin.axes[3], c)
        if corners[0] or out_c:
            self._count_beyond(n, ctx, prefix, c)
        return corner_value(corners, k, t)

    def _grid_values(
        self, grid: np.ndarray, n: ArrayLike, chunk: ArrayLike, ctx: ArrayLike, prefix: ArrayLike
    ) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised values of ``grid`` under the between rule, and which were clamped."""
        if self._lin is not None:
            return self._lin.many(grid, n, chunk, ctx, prefix)
        flat, out = self.cells(n, chunk, ctx, prefix)
        return np.asarray(grid, dtype=float).reshape(-1)[flat], out

    def lookup(
        self,
        q: float,
        n_decode: ArrayLike,
        chunk: ArrayLike,
        ctx: ArrayLike = 0,
        prefix: ArrayLike = 0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``predict`` for arrays without counting: (values, clamped mask). For evaluation."""
        return self._grid_values(self._quantile_array(q), n_decode, chunk, ctx, prefix)

    def lookup_bound(
        self, n_decode: ArrayLike, chunk: ArrayLike, ctx: ArrayLike = 0, prefix: ArrayLike = 0
    ) -> np.ndarray:
        """``predict(tail) + margin`` for arrays without counting (the planning bound)."""
        if self._margin is None:
            raise self._no_margin()
        tail, _ = self.lookup(self._margin.quantile, n_decode, chunk, ctx, prefix)
        return tail + self._rho * tail

    @staticmethod
    def _shape_out(result: np.ndarray) -> float | np.ndarray:
        return float(result) if result.ndim == 0 else result

    # -------------------------------------------------------------- predictor
    def predict(
        self,
        n_decode: ArrayLike,
        chunk: ArrayLike,
        ctx: ArrayLike = 0,
        prefix: ArrayLike = 0,
        q: float = 0.5,
    ) -> float | np.ndarray:
        """The ``q``-quantile of iteration time in ms, between grid points by the table's
        ``between`` rule (multilinear interpolation by default, or round up)."""
        lst = self._flat.get(q)
        if lst is None:
            lst = self._flat.get(float(q))
            if lst is None:
                raise self._missing(float(q))
        q = float(q)
        return self._answer(lst, self._blend[q], self._q[q], n_decode, chunk, ctx, prefix)

    def _answer(
        self,
        lst: list[float],
        blend: BlendedGrid | None,
        grid: np.ndarray,
        n_decode: ArrayLike,
        chunk: ArrayLike,
        ctx: ArrayLike,
        prefix: ArrayLike,
    ) -> float | np.ndarray:
        """One grid's answer to a query (scalar fast paths, or arrays), counted if clamped."""
        kind = _scalar_kind(n_decode, chunk, ctx, prefix)
        if kind == 2:
            n_decode, ctx, prefix, chunk = _plain(n_decode, ctx, prefix, chunk)
        if kind and blend is not None:
            return self._linear(blend, n_decode, ctx, prefix, chunk)
        if kind:
            return lst[self._index(n_decode, ctx, prefix, chunk)]
        values, out = self._grid_values(grid, n_decode, chunk, ctx, prefix)
        self._count_beyond_many((n_decode, ctx, prefix, chunk))
        return self._shape_out(values)

    def margin(
        self,
        n_decode: ArrayLike,
        chunk: ArrayLike,
        ctx: ArrayLike = 0,
        prefix: ArrayLike = 0,
    ) -> float | np.ndarray:
        """Calibrated margin δ in ms, so that P(actual > P_tail + δ) <= 1 - target:
        ``rho · predict(q=tail)`` (the product taken after the interpolation)."""
        if self._margin is None:
            raise self._no_margin()
        return self._rho * self.predict(n_decode, chunk, ctx, prefix, q=self._margin.quantile)

    def energy(
        self,
        n_decode: ArrayLike,
        chunk: ArrayLike,
        ctx: ArrayLike = 0,
        prefix: ArrayLike = 0,
    ) -> float | np.ndarray:
        """Median device energy of one iteration in J (NaN when samples had no meter)."""
        if self._energy is None:
            shape = np.broadcast(n_decode, chunk, ctx, prefix).shape
            return math.nan if not shape else np.full(shape, np.nan)
        return self._answer(self._eflat, self._eblend, self._energy, n_decode, chunk, ctx, prefix)

    def _row(self, q: float, use_margin: bool, base: int) -> tuple[list[float], bool]:
        """Bounds along chunk at one (n, ctx, prefix) cell, and whether they are sorted."""
        lst = self._flat.get(q)
        if lst is None:
            raise self._missing(q)
        if use_margin and self._mflat is None:
            raise self._no_margin()
        width = self._shape[3]
        vals = lst[base : base + width]
        if use_margin:
            # Same float operations as predict(...) + margin(...): exact consistency.
            vals = [v + m for v, m in zip(vals, self._mflat[base : base + width], strict=True)]
        ordered = all(a <= b for a, b in zip(vals, vals[1:], strict=False))
        self._row_cache[(q, use_margin, base)] = (vals, ordered)
        return vals, ordered

    def max_chunk(
        self,
        n_decode: int,
        ctx: int,
        prefix: int,
        budget_ms: float,
        limit: int,
        q: float = PLAN_QUANTILE,
        use_margin: bool = True,
    ) -> int:
        """Largest ``c`` in ``[1, limit]`` with ``predict(q) (+ margin) <= budget_ms``, else 0.

        Exactly consistent with :meth:`predict`/:meth:`margin` for every integer chunk.
        Under the linear rule the bound is piecewise linear in the chunk with breaks
        at the chunk axis's values, non-decreasing exactly (:mod:`.interp`). First
        the bound at the column the limit reaches (or at the segment of the last
        crossing, if lower): when it fits, so does the limit, and that is the
        answer (one evaluation: the usual case while decodes leave room). Otherwise
        find the segment between two chunk columns where the bound crosses the
        budget (the four weighted rows' column sums, as :meth:`predict` adds them
        up), solve the line there, and settle the integer. The settle is exact
        with :meth:`predict`'s own arithmetic; it is skipped when the line clears the
        budget on both sides by far more than the rounding of either (see
        :data:`LINE_SLACK`), which leaves no other answer.

        Under round-up, the fitting chunks are ``c <= chunk_axis[k]`` for the last
        fitting grid column ``k`` (or every chunk when the last column fits: clamp).

        This runs at every step of a scheduler (the engine's SLOWeave, the vLLM
        plug-in), right after the scheduler's own work has pushed it out of the CPU's
        caches, where its cost grows with every Python operation it executes: so the
        linear rule is written out here in straight-line code (as many interpreter
        instructions per call as the analytic formula's closed form, fewer on the
        usual path), with the same float operations in the same order as
        :func:`.interp.corner_value`: the probe blends the ``n_decode`` sides
        (step 1) at only the values it reads (blending whole rows for every new
        ``n_decode`` cost a short run ~10%); a walk blends the four rows at each
        column it reads and keeps that column in its box's entry (a new box is
        walked for two columns in most calls; the vLLM plug-in's long prompt walks the
        same box step after step); the sides of every integer ``n_decode`` are made
        at load (a scheduler asks integers: making each on first use cost a short
        run ~1%); the prefix's and ctx's sides are looked up by one bisection each
        (a prompt's first chunk, prefix 0, by one comparison).
        ``tests/costmodels/test_interp_fast.py`` checks the answers against the
        vectorised :meth:`predict`, at and around every boundary.
        """
        limit = int(limit)  # (an int itself: the quickest way to make sure of it)
        if limit < 1:
            return 0
        # ctx and the budget as Python floats: a numpy float32 would compute (and
        # compare) in single precision (a prefix past the first value too, below;
        # n_decode only keys its sides, made from the Python number it holds)
        ctx, budget_ms = float(ctx), float(budget_ms)
        search = self._search
        # what every call reads, in one tuple: one look-up, then local variables (each
        # operation of the interpreter costs, here right after a scheduler's step, as
        # much as several do in a loop); the grid is the last call's quantile and flag's
        (mode_q, mode_margin, values, rho, n_sides, prefix_first, ctx_axis, ctx_cells,
         probe_cols, cols) = search.hot  # fmt: skip
        # (is not: the interpreter compares floats quickly, bools only by identity)
        if q != mode_q or use_margin is not mode_margin:
            if not self._set_mode(q, use_margin):  # round-up rule, P50 + the P99's
                # margin, or no such grid
                return self._max_chunk_other(n_decode, ctx, prefix, budget_ms, limit, q,
                                             use_margin)  # fmt: skip
            values, rho = search.hot[2:4]
        try:
            out, a, b, dn, lo, base = n_sides[n_decode]
        except KeyError:  # not made yet: a fraction, or an integer past those made
            # at load (then made once, see _other_n_sides)
            out, a, b, dn, lo, base = self._other_n_sides(n_decode)
        # -- Multilinear.corners(..., n_decode, ctx, prefix), inline ------------------
        i = bisect_right(ctx_axis, ctx)  # ctx: rows y0 (weight u0) and y1 (u1)
        y0, y1, x, span = ctx_cells[i]
        if span:  # axis[i - 1] <= ctx < axis[i]: t of the way (0 on the value)
            u1 = (ctx - x) / span
            u0 = 1.0 - u1
        else:  # at or past the last value, or before the first: that edge alone
            u0, u1 = 1.0, 0.0
            out = out or ctx < ctx_axis[0] or ctx > ctx_axis[-1]
        # prefix: rows z0 (weight v0) and z1 (v1); then the four (ctx, prefix) rows'
        # low-side flat offsets p0 (z0, y0), p1 (z1, y0), p2 (z0, y1), p3 (z1, y1): row
        # r's blended value at column j (step 1) is a * values[r + j] + b * values[r +
        # dn + j], without interp's leading 0.0 + (it adds exactly nothing to a product
        # of non-negative numbers, here and in the walk)
        if prefix == prefix_first:  # a prompt's first chunk (prefix 0): that row
            p0, p2, v1 = lo + y0, lo + y1, 0.0
        else:
            prefix, axis = float(prefix), search.prefix_axis
            i = bisect_right(axis, prefix)
            z0, z1, x, span = search.prefix_cells[i]
            l0 = lo + z0
            p0, p2 = l0 + y0, l0 + y1
            if span:  # between two values (v1 is 0.0 on the lower one)
                v1 = (prefix - x) / span
                v0 = 1.0 - v1
                l1 = lo + z1
                p1, p3 = l1 + y0, l1 + y1
                w0, w1, w2, w3 = u0 * v0, u0 * v1, u1 * v0, u1 * v1
            else:  # past the last value, or before the first: that edge alone
                v1 = 0.0
                out = out or prefix < axis[0] or prefix > axis[-1]
        # -- the bound at chunk column k: corner_value(..., k, 0.0) + margin (rho 0.0
        # when none: f + 0.0 * f is f, values being finite), inline. Start at the first
        # column the limit reaches, or lower at the segment of the last crossing: the
        # bound is non-decreasing in the chunk, so when that column fits, the limit
        # does, in one evaluation (the usual answer while decodes leave room)
        k = bisect_left(probe_cols, limit)  # (at most the last column)
        if k <= search.hint:  # the limit reaches no further than where the last walk
            # ended: it likely fits, so probe its column inline (step 1 at just the
            # values read)
            if not v1:  # on a prefix value (a prompt's first chunk: 0) or clamped: the
                # second side weighs 0 (v0 is 1.0) and its terms add exactly +0.0
                f_lo = u0 * (a * values[p0 + k] + b * values[p0 + dn + k]) + u1 * (
                    a * values[p2 + k] + b * values[p2 + dn + k]
                )
            else:  # the prefix between two values
                f_lo = (
                    w0 * (a * values[p0 + k] + b * values[p0 + dn + k])
                    + w1 * (a * values[p1 + k] + b * values[p1 + dn + k])
                    + w2 * (a * values[p2 + k] + b * values[p2 + dn + k])
                    + w3 * (a * values[p3 + k] + b * values[p3 + dn + k])
                )
            f_lo = f_lo + rho * f_lo
            if f_lo <= budget_ms:  # so does the limit (past the last column: constant)
                if out or limit > cols[k]:
                    self._count_beyond(n_decode, ctx, prefix, limit)
                return limit
        else:  # beyond: a walk from there is likely (a long prompt's chunk)
            k, f_lo = search.hint, None
        # -- the walk, one column at a time on the four rows' values there (step 1),
        # kept per column in the box's entry: made where first read (a new box is
        # walked for two columns in most calls), read again by the next steps' walks
        # (the vLLM plug-in's long prompt walks one box step after step). The box's
        # key: n_decode's base plus the first row (~: the prefix between two values,
        # all four rows count; the others follow from the first: sides_by_position)
        if v1:
            rows, key = (p0, p1, p2, p3), ~(base + p0)
        else:
            rows, key = (p0, p0, p2, p2), base + p0
            w0, w1, w2, w3 = u0, 0.0, u1, 0.0
        last = search.last
        boxes = search.mode_boxes
        box = boxes.get(key)
        if box is None:
            box = keep_bounded(boxes, key, [None] * len(cols))
        if f_lo is None:
            r0, r1, r2, r3 = box[k] or blend_column(box, values, dn, a, b, rows, k)
            f_lo = w0 * r0 + w1 * r1 + w2 * r2 + w3 * r3
            f_lo = f_lo + rho * f_lo
        f_top = math.inf
        if f_lo <= budget_ms:  # walk up while the next column fits too (and is needed)
            while k < last and cols[k] < limit:
                j = k + 1
                r0, r1, r2, r3 = box[j] or blend_column(box, values, dn, a, b, rows, j)
                f = w0 * r0 + w1 * r1 + w2 * r2 + w3 * r3
                f = f + rho * f
                if f > budget_ms:
                    f_top = f
                    break
                k, f_lo = j, f
        else:  # walk down to the last column that fits (none: a NaN budget too)
            f_top = f_lo
            while k > 0:
                k -= 1
                r0, r1, r2, r3 = box[k] or blend_column(box, values, dn, a, b, rows, k)
                f = w0 * r0 + w1 * r1 + w2 * r2 + w3 * r3
                f = f + rho * f
                if f <= budget_ms:
                    f_lo = f
                    break
                f_top = f
            else:
                k = -1  # not even column 0 fits: the least the bound can be
        fit = cols[k] if k >= 0 else 0
        if k < 0:
            search.hint = 0
            answer = 0
        elif limit <= fit or k == last:  # (beyond the last column the bound is constant)
            if k > search.hint:  # the limit fitted this far up: probe up to here inline
                search.hint = k
            answer = limit
        else:  # the crossing in (fit, top): bound(fit) <= budget < bound(top)
            search.hint = k
            top = cols[k + 1]
            fail = top if top <= limit else limit + 1  # known not to fit, or not allowed
            slope = (f_top - f_lo) / (top - fit)
            c = int(fit + (budget_ms - f_lo) / slope)  # where the line crosses the budget
            c = fit if c < fit else fail - 1 if c >= fail else c
            line = f_lo + (c - fit) * slope  # the line at c, and at c + 1 below
            slack = LINE_SLACK * (1.0 + abs(rho)) * (f_top + abs(budget_ms))
            if (c == fit or line + slack <= budget_ms) and (
                c + 1 == fail or line + slope - slack > budget_ms
            ):
                answer = c
            else:  # settle exactly (rare: the budget lies that close to the line)
                fcols = search.fcols
                answer = settle(
                    box[k] or blend_column(box, values, dn, a, b, rows, k),
                    box[k + 1] or blend_column(box, values, dn, a, b, rows, k + 1),
                    (w0, w1, w2, w3),
                    rho,
                    fcols[k],
                    fcols[k + 1],
                    fit,
                    fail,
                    c,
                    budget_ms,
                )
        if out or answer > cols[last]:
            self._count_beyond(n_decode, ctx, prefix, answer)
        return answer

    def _max_chunk_other(
        self, n_decode: float, ctx: float, prefix: float, budget_ms: float, limit: int,
        q: float, use_margin: bool,
    ) -> int:  # fmt: skip
        """:meth:`max_chunk` where its straight-line search does not apply: the round-up
        rule, or planning on one quantile plus another's margin; else the error."""
        n_decode, prefix = _plain(n_decode, prefix)  # (as predict: not in single precision)
        if self._lin is None:
            return self._max_chunk_round_up(n_decode, ctx, prefix, budget_ms, limit, q, use_margin)
        blend = self._blend.get(float(q)) if float(q) in self._q else None
        if blend is None:
            raise self._missing(float(q))
        if use_margin and self._margin is None:
            raise self._no_margin()
        return self._max_chunk_two_grids(n_decode, ctx, prefix, budget_ms, limit, q, blend)

    def _set_mode(self, q: float, use_margin: bool) -> bool:
        """Make ``(q, use_margin)`` :meth:`max_chunk`'s current mode (its flat grid, the
        margin's factor, 0.0 without, and its walks' columns); false where the
        straight-line search does not apply (round-up, P50 + the P99's margin, a
        missing grid or margin: :meth:`_max_chunk_other`)."""
        search = self._search
        key = (q, bool(use_margin))
        found = search.grids.get(key)
        if found is not None:
            search.hot = (q, use_margin, *found, *search.hot[4:])
            search.mode_boxes = search.boxes.setdefault(key, {})
        return found is not None

    def _other_n_sides(self, n_decode: float) -> NSides:
        """:meth:`max_chunk`'s sides of an ``n_decode`` not made at load (a fraction, an
        integer past the axis or past those made at load), each new one with a
        box-key base never handed out before. An integer joins the ones made at load
        (so that the next call finds it without the failed look-up, up to twice
        :data:`.chunk_search.PREMADE_N_DECODE` of them); fractions are kept until
        :data:`.interp.CACHE_SIZE` of them."""
        search = self._search
        others = search.n_other
        sides = others.get(n_decode)
        if sides is None:
            # computed on a Python number: it serves every n_decode equal to this one
            n = n_decode if type(n_decode) in _PY_SCALARS else n_decode.item()
            sides = (*self._lin.flat_sides(n), search.next_base)
            search.next_base += search.size
            made = search.n_sides
            if float(n).is_integer() and len(made) < 2 * PREMADE_N_DECODE:
                made[n] = sides
            else:
                keep_bounded(others, n_decode, sides)
        return sides

    def _max_chunk_round_up(
        self, n_decode: float, ctx: float, prefix: float, budget_ms: float, limit: int,
        q: float, use_margin: bool,
    ) -> int:  # fmt: skip
        """:meth:`max_chunk` under the round-up rule."""
        a0, a1, a2, a3, n0, n1, n2, n3 = self._fast
        i0 = bisect_left(a0, n_decode)
        i1 = bisect_left(a1, ctx)
        i2 = bisect_left(a2, prefix)
        out = i0 == n0 or i1 == n1 or i2 == n2
        out = out or n_decode < a0[0] or ctx < a1[0] or prefix < a2[0]
        if out:
            i0, i1, i2 = min(i0, n0 - 1), min(i1, n1 - 1), min(i2, n2 - 1)
        base = ((i0 * n1 + i1) * n2 + i2) * n3
        hit = self._row_cache.get((q, use_margin, base))
        row, ordered = hit if hit is not None else self._row(float(q), bool(use_margin), base)
        last = len(a3) - 1
        answer = 0
        if not budget_ms >= row[0] and ordered:  # also catches NaN budgets
            answer = 0
        elif ordered:
            k = bisect_right(row, budget_ms) - 1  # columns 0..k fit, k+1.. do not
            answer = limit if k == last else min(limit, a3[k])
        else:  # float rounding broke the order (negative rho): scan the columns, still exact
            for j in range(last, -1, -1):
                if row[j] <= budget_ms:
                    top = limit if j == last else min(limit, a3[j])
                    if j == 0 or top > a3[j - 1]:
                        answer = top
                        break
        if answer > a3[-1]:
            out = True
        if out:
            self._count_beyond(n_decode, ctx, prefix, answer)
        return answer if answer >= 1 else 0

    def _max_chunk_two_grids(
        self, n: float, ctx: float, prefix: float, budget: float, limit: int, q: float,
        blend: BlendedGrid,
    ) -> int:  # fmt: skip
        """:meth:`max_chunk` under the linear rule with the margin taken from another
        quantile's grid (planning on P50 + the P99's margin): the same search, with
        :func:`.interp.corner_value` on two grids per probe."""
        lin = self._lin
        rows = lin.corners(blend, n, ctx, prefix)
        tail = lin.corners(self._blend[self._margin.quantile], n, ctx, prefix)
        rho = self._rho
        fcols = lin.axes[3]

        def bound(c: float) -> float:  # exactly predict(...) + margin(...)
            k, t, _ = axis_position(fcols, c)
            return corner_value(rows, k, t) + rho * corner_value(tail, k, t)

        cols = self._ax_lists[3]
        last = len(cols) - 1
        answer = 0
        f_lo = bound(cols[0])
        if budget >= f_lo:
            i, j, f_top = 1, last + 1, math.inf
            while i < j:
                mid = (i + j) // 2
                f = bound(cols[mid])
                if f <= budget:
                    i, f_lo = mid + 1, f
                else:
                    j, f_top = mid, f
            lo = cols[i - 1]
            if limit <= lo or i > last:
                answer = limit
            else:
                top = cols[i]
                if limit < top:
                    top, f_top = limit, bound(limit)
                if f_top <= budget:
                    answer = limit
                elif lo >= 1 or (top > 1 and (f_lo := bound(1)) <= budget):
                    lo = max(lo, 1)
                    guess = lo + (budget - f_lo) / (f_top - f_lo) * (top - lo)
                    answer = min(max(int(guess), lo), top - 1)
                    while answer > lo and bound(answer) > budget:
                        answer -= 1
                    while answer + 1 < top and bound(answer + 1) <= budget:
                        answer += 1
        if rows[0] or answer > cols[last]:
            self._count_beyond(n, ctx, prefix, answer)
        return answer

    # -------------------------------------------------------------- JSON
    def to_json(self) -> dict[str, Any]:
        """The ``servecal.costtable/1`` document (see docs/costtable.md), with its
        ``content_hash`` (:mod:`.provenance`)."""
        doc = self._document()
        doc["content_hash"] = content_hash(doc)
        return doc

    def content_hash(self) -> str:
        """``sha256:<hex>`` of what the table answers with (see :mod:`.provenance`)."""
        return content_hash(self._document())

    def with_between(self, between: str) -> CostTable:
        """The same table answering between grid points by ``between`` (a new table)."""
        return CostTable(
            axes=self.axes, quantiles=self._q, margin=self._margin, energy_j=self._energy,
            fingerprint=self._fingerprint, model=self._model, validation=self._validation,
            created=self._created, between=between, tp=self._tp,
        )  # fmt: skip

    def _document(self) -> dict[str, Any]:
        return {
            "schema": COSTTABLE_SCHEMA,
            "fingerprint": self._fingerprint,
            "tp": self._tp,
            "model": self._model,
            "axis_order": list(AXES),
            "axes": {a: list(v) for a, v in zip(AXES, self._axes, strict=True)},
            "domain": {a: [lo, hi] for a, (lo, hi) in self.domain.items()},
            "between": self._between,
            "beyond": BEYOND_RULE,
            "quantiles": {repr(q): self._flat[q] for q in self._q},
            "tail": self.tail,
            "margin": asdict(self._margin) if self._margin else None,
            "energy_j": self._eflat,
            "validation": self._validation,
            "created": self._created,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, allow_nan=False) + "\n"

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the JSON document atomically."""
        atomic_write_bytes(path, self.dumps().encode())

    @classmethod
    def from_json(
        cls, doc: Any, source: str = "<cost table>", allow_edited: bool | None = None
    ) -> CostTable:
        """Build a table from a parsed document; defects raise a one-line InputError.

        A ``content_hash`` that does not match the numbers is refused unless
        ``allow_edited`` (default: ``--allow-edited`` in force, see :mod:`.provenance`).
        """
        from servecal.costmodels.table_schema import parse_document

        table = parse_document(cls, doc, source)
        check_content_hash(doc, table.content_hash(), source, allow_edited)
        return table

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        strict: bool | None = None,
        fingerprint: Mapping[str, Any] | None = None,
        allow_edited: bool | None = None,
        other: str = "the samples",
    ) -> CostTable:
        """Load a cost table; refuse (or, if not ``strict``, warn on) a fingerprint
        mismatch with ``fingerprint`` (that of ``other``); refuse edited numbers, or a
        file without a content hash, unless ``allow_edited``. ``None`` for either: the
        process's ``--allow-mismatch`` / ``--allow-edited`` (:mod:`.provenance`)."""
        p = Path(path)
        doc = read_table_document(p)
        check_hash_present(doc, str(p), allow_edited)
        table = cls.from_json(doc, str(p), allow_edited)
        if fingerprint is not None:
            compare_fingerprints(table.fingerprint, fingerprint, str(p), other, strict)
        return table

    def __repr__(self) -> str:
        shape = "x".join(str(s) for s in self._shape)
        return f"CostTable({shape} grid, quantiles={self.quantiles}, tail={self.tail})"


def read_table_document(path: str | os.PathLike[str]) -> Any:
    """A cost table file's parsed JSON (:meth:`CostTable.from_json` checks it is a
    table); a file that cannot be read or parsed is one :class:`InputError` line."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise InputError(f"cannot read cost table {p}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read cost table {p} ({type(exc).__name__})") from None
    try:
        doc = loads_unique(text)
    except DuplicateKeyError as exc:
        raise InputError(f"{p}: not a cost table: {exc}") from None
    except ValueError as exc:
        raise InputError(f"{p}: not a cost table: invalid JSON ({exc})") from None
    except RecursionError:
        raise InputError(f"{p}: not a cost table: JSON nested too deeply") from None
    return doc
