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
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from servecal.costmodels.atomic import atomic_write_bytes
from servecal.costmodels.chunk_search import largest_fitting_chunk, round_up_fit
from servecal.costmodels.errors import InputError
from servecal.costmodels.interp import BlendedGrid, Multilinear
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


def _checked_axes(axes: Mapping[str, Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    """The axes in storage order, each non-empty and strictly increasing."""
    if set(axes) != set(AXES):
        raise ValueError(f"axes must be exactly {AXES}, got {sorted(axes)}")
    out = tuple(tuple(int(v) for v in axes[a]) for a in AXES)
    for name, vals in zip(AXES, out, strict=True):
        if not vals or any(b <= a for a, b in zip(vals, vals[1:], strict=False)):
            raise ValueError(f"axis '{name}' must be non-empty and strictly increasing")
    return out


def _checked_grid(values: ArrayLike, shape: tuple[int, ...], label: str) -> np.ndarray:
    """``values`` as a grid of ``shape``: one finite value >= 0 per cell."""
    arr = np.asarray(values, dtype=float).reshape(-1)
    size = math.prod(shape)
    if arr.size != size or not np.isfinite(arr).all() or (arr < 0).any():
        raise ValueError(f"{label}: need {size} finite values >= 0")
    return arr.reshape(shape)


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
        self._axes = _checked_axes(axes)
        self._shape = tuple(len(v) for v in self._axes)
        if not quantiles:
            raise ValueError("a cost table needs at least one quantile")
        self._q: dict[float, np.ndarray] = {}
        for q in sorted(quantiles):
            if not 0.0 < float(q) < 1.0:
                raise ValueError(f"quantile must be in (0, 1), got {q}")
            self._q[float(q)] = _checked_grid(quantiles[q], self._shape, f"quantile {q}")
        if margin is not None and margin.quantile not in self._q:
            raise ValueError(f"margin quantile {margin.quantile} is not a table quantile")
        self._margin = margin
        self._energy = None
        if energy_j is not None:
            self._energy = _checked_grid(energy_j, self._shape, "energy_j")
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
        if corners[0] or c < lin.axes[3][0] or c > lin.axes[3][-1]:
            self._count_beyond(n, ctx, prefix, c)
        return lin.chunk_value(corners, c)

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

        Exactly consistent with :meth:`predict`/:meth:`margin` for every integer chunk:
        the bound searched is the one they compute, from the query's four weighted
        rows (:meth:`.interp.Multilinear.corners`, cached per ``n_decode``), by
        :func:`.chunk_search.largest_fitting_chunk` under the linear rule (the bound
        is non-decreasing and linear between chunk columns) or
        :func:`.chunk_search.round_up_fit` under round-up. A query beyond the grid,
        or an answer past the chunk axis, is counted once in :attr:`out_of_domain`.
        """
        limit = int(limit)
        if limit < 1:
            return 0
        if type(n_decode) not in _PY_SCALARS or type(prefix) not in _PY_SCALARS:
            n_decode, prefix = _plain(n_decode, prefix)  # (not in single precision)
        ctx, budget_ms, q = float(ctx), float(budget_ms), float(q)
        cols = self._ax_lists[3]
        if self._lin is None:
            out, row = self._round_up_row(q, use_margin, n_decode, ctx, prefix)
            answer = round_up_fit(row, cols, limit, budget_ms)
        else:
            out, bound, at_columns = self._linear_bound(q, use_margin, n_decode, ctx, prefix)
            answer = largest_fitting_chunk(bound, at_columns, cols, limit, budget_ms, self._rho)
        if out or answer > cols[-1]:
            self._count_beyond(n_decode, ctx, prefix, answer)
        return answer

    def _linear_bound(
        self, q: float, use_margin: bool, n: float, ctx: float, prefix: float
    ) -> tuple[bool, Callable[[int], float], Callable[[], list[float]]]:
        """Whether the query is clamped, its bound along the chunk (exactly
        ``predict(q)`` plus, with ``use_margin``, ``margin`` = ``rho · predict(tail)``)
        and the same bound at every chunk column."""
        blend = self._blend.get(q)
        if blend is None:
            raise self._missing(q)
        lin, rho = self._lin, self._rho
        rows = lin.corners(blend, n, ctx, prefix)
        at, columns = lin.chunk_value, lin.column_values
        if not use_margin:
            return rows[0], lambda c: at(rows, c), lambda: columns(rows)
        if self._margin is None:
            raise self._no_margin()
        if q == self._margin.quantile:
            return (
                rows[0],
                lambda c: (f := at(rows, c)) + rho * f,
                lambda: [f + rho * f for f in columns(rows)],
            )
        tail = lin.corners(self._blend[self._margin.quantile], n, ctx, prefix)
        return (
            rows[0],
            lambda c: at(rows, c) + rho * at(tail, c),
            lambda: [f + rho * g for f, g in zip(columns(rows), columns(tail), strict=True)],
        )

    def _round_up_row(
        self, q: float, use_margin: bool, n: float, ctx: float, prefix: float
    ) -> tuple[bool, list[float]]:
        """Whether the query is clamped, and the bound of its round-up cell's chunk row."""
        out, base = False, 0
        for axis, x in zip(self._ax_lists[:3], (n, ctx, prefix), strict=True):
            i = bisect_left(axis, x)
            out = out or i == len(axis) or x < axis[0]
            base = base * len(axis) + min(i, len(axis) - 1)
        base *= self._shape[3]
        hit = self._row_cache.get((q, use_margin, base))
        row, _ = hit if hit is not None else self._row(q, bool(use_margin), base)
        return out, row

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
