"""The cost table: a monotone grid of iteration-time quantiles with a conformal margin.

This is what a server loads (``CostTable.load``) and what the engine asks every
iteration. Every answer comes from one interpolation routine (:mod:`.interp`;
``max_chunk`` searches its bound, :mod:`.chunk_search`), plain Python on scalars and
numpy on arrays: loading a table costs no compiler.

Grid: axes ``n_decode, ctx, prefix, chunk`` (chunk last, so a ``max_chunk`` row is
contiguous); values are stored flat in C order over that axis order.

* between grid points (``between``): **linear**, multilinear interpolation of the
  box's corners (:mod:`.interp`; monotone like the grid, the default for fitted
  tables), or **round up** to the next grid point on every axis (over-predicts by
  up to the grid's spacing: conservative, for a table that must never under-predict);
* beyond the grid: **clamp** to the edge and count the query in ``out_of_domain``.

Margin: ``δ(x) = rho · P_tail(x)`` (a relative split-conformal margin, see
docs/costtable.md), so ``P_tail + δ`` is the calibrated upper bound.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from servecal.costmodels.chunk_search import largest_fitting_chunk
from servecal.costmodels.interp import interpolate, interpolate_arrays, pack
from servecal.costmodels.jsontext import DuplicateKeyError, loads_unique
from servecal.costmodels.predictor import PLAN_QUANTILE
from servecal.costmodels.provenance import (
    FINGERPRINT_KEYS,
    NO_TRUST,
    FingerprintMismatchWarning,  # noqa: F401 - re-exported: where it always lived
    TableTrust,
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


#: :meth:`CostTable.max_chunk`'s bound in one mode, as its search takes it
#: (:func:`.chunk_search.largest_fitting_chunk`): the planned grid's index, the
#: margin's grid's (-1: the planned one's own, or none), rho, whether it rises.
Bound = tuple[int, int, float, bool]


#: Scalar queries (``max_chunk``, ``predict``, ``margin``, ``energy``) after which a
#: table answers them with the compiled routines (:mod:`.hot_search`): numba's import
#: and the routines' loading cost ~1 s once (a fresh install compiles them, ~7 s),
#: each query after it ~1-2 µs instead of ~3-20; so a short command or a 2,000-request
#: simulation never loads numba, and a hot loop (a long simulation, the vLLM plug-in,
#: a router's predictions) repays it within ~1e5 queries.
HOT_CALLS = 50_000

#: A scalar query (any other argument, a 0-d array included, is answered as arrays).
_NUMBER = (int, float, np.integer, np.floating)


def _checked_axes(axes: Mapping[str, Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    """The four axes in storage order, each non-empty and strictly increasing."""
    if set(axes) != set(AXES):
        raise ValueError(f"axes must be exactly {AXES}, got {sorted(axes)}")
    checked = tuple(tuple(int(v) for v in axes[a]) for a in AXES)
    for name, vals in zip(AXES, checked, strict=True):
        if not vals or any(b <= a for a, b in zip(vals, vals[1:], strict=False)):
            raise ValueError(f"axis '{name}' must be non-empty and strictly increasing")
    return checked


def _checked_grid(label: str, values: ArrayLike, shape: tuple[int, ...]) -> np.ndarray:
    """The table's own copy of a grid, of ``shape``, every value finite and >= 0."""
    arr = np.array(values, dtype=float).reshape(-1)
    size = math.prod(shape)
    if arr.size != size or not np.isfinite(arr).all() or (arr < 0).any():
        raise ValueError(f"{label}: need {size} finite values >= 0")
    return arr.reshape(shape)


def _checked_tp(tp: Any) -> int:
    """Tensor-parallel degree of the deployment the times are for (default: what the
    samples' provenance says; tables and samples from before TP are TP 1)."""
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        raise ValueError(f"tp must be an integer >= 1, got {tp!r}")
    return tp


class CostTable:
    """Monotone quantile grid with margin, energy and provenance (see module docstring)."""

    #: Every answer is non-decreasing in each of ``n_decode, chunk, ctx, prefix`` (the
    #: grid is checked so, and the interpolation keeps it: :mod:`.interp`; exactly along
    #: the chunk, to within rounding along the others). Readers may rely on it: a
    #: router bounds two predictions by one (:class:`.routers.PredictedLatency`).
    non_decreasing = True

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
            self._q[float(q)] = _checked_grid(f"quantile {q}", quantiles[q], self._shape)
        if margin is not None and margin.quantile not in self._q:
            raise ValueError(f"margin quantile {margin.quantile} is not a table quantile")
        self._margin = margin
        self._energy = None
        if energy_j is not None:
            self._energy = _checked_grid("energy_j", energy_j, self._shape)
        self._fingerprint = dict(fingerprint or {})
        self._tp = _checked_tp(self._fingerprint.get("tp", 1) if tp is None else tp)
        self._model = dict(model or {})
        self._validation = dict(validation or {})
        self._created = created
        self._check_monotone()
        self._prepare_queries()

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

    def _prepare_queries(self) -> None:
        """The routines' state (:func:`.interp.pack`: the axes, the quantile grids by
        index, then the energy grid, the rule, the clamped-query counts)."""
        grids = [*self._q.values(), *([] if self._energy is None else [self._energy])]
        self._state = pack(self._axes, grids, round_up=self._between == "round_up")
        self._index = {q: i for i, q in enumerate(self._q)}
        self._energy_index = len(self._q) if self._energy is not None else None
        self._rho = self._margin.rho if self._margin else 0.0
        self._bounds: dict[tuple[float, bool], Bound] = {}
        self._calls = 0  # scalar queries, until HOT_CALLS
        self._hot: np.ndarray | None = None  # the compiled search's state, once hot
        self._bind_search()

    def _bind_search(self) -> None:
        """``max_chunk``'s search and the scalar query, and their state: plain Python,
        or once the table is hot the compiled routines on their own copy of the grids
        (which counts their clamped queries there: :attr:`out_of_domain` adds both)."""
        if self._hot is None:
            self._search, self._scalar = largest_fitting_chunk, interpolate
            self._search_state = self._state
            return
        from servecal.costmodels import hot_search

        self._search = hot_search.entry_point(hot_search.largest_fitting_chunk)
        self._scalar = hot_search.entry_point(hot_search.interpolate)
        self._search_state = self._hot

    def _go_hot(self) -> None:
        """Switch the scalar queries to the compiled routines (:data:`HOT_CALLS`)."""
        from servecal.costmodels import hot_search

        grids = [*self._q.values(), *([] if self._energy is None else [self._energy])]
        self._hot = hot_search.pack(self._axes, grids, round_up=self._between == "round_up")
        self._bind_search()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_search", "_scalar")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bind_search()

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
        return self._counts()[0]

    @property
    def beyond_grid(self) -> dict[str, int]:
        """Per axis, how many counted queries lay beyond it (priced at its edge); a
        query beyond two axes counts on both, once in :attr:`out_of_domain`."""
        return dict(zip(AXES, self._counts()[1:], strict=True))

    def _counts(self) -> list[int]:
        """The clamped-query counts (:data:`.interp.COUNTS`), the compiled search's too."""
        counts = self._state.counts
        if self._hot is None:
            return counts
        return [c + int(h) for c, h in zip(counts, self._hot[: len(counts)], strict=True)]

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

    def _grid(self, q: float) -> int:
        """The index of the ``q`` grid in the routines' state."""
        g = self._index.get(q)
        if g is None:
            raise self._missing(float(q))
        return g

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
        for x, axis in zip(xs, self._axes, strict=True):
            ax = np.asarray(axis, dtype=float)
            i = np.searchsorted(ax, x, side="left")
            out |= (x < ax[0]) | (x > ax[-1])
            flat = flat * ax.size + np.minimum(i, ax.size - 1)
        return flat, out

    def _many(
        self, g: int, n: ArrayLike, chunk: ArrayLike, ctx: ArrayLike, prefix: ArrayLike,
        count: bool,
    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """Grid ``g`` on arrays (broadcast): values, and which were clamped (counted
        if ``count``)."""
        return interpolate_arrays(self._state, g, count, n, chunk, ctx, prefix)

    def lookup(
        self,
        q: float,
        n_decode: ArrayLike,
        chunk: ArrayLike,
        ctx: ArrayLike = 0,
        prefix: ArrayLike = 0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``predict`` for arrays without counting: (values, clamped mask). For evaluation."""
        return self._many(self._grid(q), n_decode, chunk, ctx, prefix, count=False)

    def lookup_bound(
        self, n_decode: ArrayLike, chunk: ArrayLike, ctx: ArrayLike = 0, prefix: ArrayLike = 0
    ) -> np.ndarray:
        """``predict(tail) + margin`` for arrays without counting (the planning bound)."""
        if self._margin is None:
            raise self._no_margin()
        tail, _ = self.lookup(self._margin.quantile, n_decode, chunk, ctx, prefix)
        return tail + self._rho * tail

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
        return self._answer(self._grid(q), n_decode, chunk, ctx, prefix)

    def _answer(
        self, g: int, n: ArrayLike, chunk: ArrayLike, ctx: ArrayLike, prefix: ArrayLike
    ) -> float | np.ndarray:
        """Grid ``g``'s answer to a query, counted if clamped (:func:`.interp.interpolate`)."""
        if all(isinstance(x, _NUMBER) for x in (n, chunk, ctx, prefix)):
            self._calls += 1
            if self._calls == HOT_CALLS:
                self._go_hot()
            return self._scalar(self._search_state, g, n, ctx, prefix, chunk)
        result, _ = self._many(g, n, chunk, ctx, prefix, count=True)
        return float(result) if result.ndim == 0 else result

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
        if self._energy_index is None:
            shape = np.broadcast(n_decode, chunk, ctx, prefix).shape
            return math.nan if not shape else np.full(shape, np.nan)
        return self._answer(self._energy_index, n_decode, chunk, ctx, prefix)

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

        The bound searched is the one :meth:`predict` and :meth:`margin` compute, by the
        same routine (:func:`.chunk_search.largest_fitting_chunk`): the limit
        first (the usual answer while decodes leave room), then a bisection over the
        chunks, as the bound never falls along the chunk; where it can (one quantile
        plus another's negative margin) the chunks from the limit down. A query beyond
        the grid, or an answer past the chunk axis, counts once in :attr:`out_of_domain`.
        After :data:`HOT_CALLS` scalar queries the same search compiled (:mod:`.hot_search`).
        """
        bound = self._bounds.get((q, use_margin)) or self._bound(q, use_margin)
        self._calls += 1
        if self._calls == HOT_CALLS:
            self._go_hot()
        return self._search(self._search_state, *bound, n_decode, ctx, prefix, budget_ms, limit)

    def _bound(self, q: float, use_margin: bool) -> Bound:
        """:meth:`max_chunk`'s :data:`Bound` for ``(q, use_margin)``, kept: it never
        falls along the chunk, except for one quantile plus another's negative margin."""
        g = self._grid(q)
        if not use_margin:
            bound = (g, -1, 0.0, True)
        elif self._margin is None:
            raise self._no_margin()
        elif self._index[self._margin.quantile] == g:  # the quantile's own margin
            bound = (g, -1, self._rho, True)
        else:
            bound = (g, self._index[self._margin.quantile], self._rho, self._rho >= 0.0)
        self._bounds[(q, use_margin)] = bound
        return bound

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
            "quantiles": {repr(q): arr.reshape(-1).tolist() for q, arr in self._q.items()},
            "tail": self.tail,
            "margin": asdict(self._margin) if self._margin else None,
            "energy_j": None if self._energy is None else self._energy.reshape(-1).tolist(),
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
        cls, doc: Any, source: str = "<cost table>", allow_edited: bool = False
    ) -> CostTable:
        """Build a table from a parsed document; defects raise a one-line InputError.

        A ``content_hash`` that does not match the numbers is refused unless
        ``allow_edited`` (``--allow-edited``, see :mod:`.provenance`).
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
        trust: TableTrust = NO_TRUST,
    ) -> CostTable:
        """Load a cost table; refuse (or, if not ``strict``, warn on) a fingerprint
        mismatch with ``fingerprint`` (that of ``other``); refuse edited numbers, or a
        file without a content hash, unless ``allow_edited``. ``None`` for either:
        what ``trust`` (the command's table flags, :class:`.provenance.TableTrust`;
        default: none) says."""
        allow = trust.allow_edited if allow_edited is None else allow_edited
        p = Path(path)
        doc = read_table_document(p)
        check_hash_present(doc, str(p), allow)
        table = cls.from_json(doc, str(p), allow)
        if fingerprint is not None:
            refuse = trust.refuse_mismatch if strict is None else strict
            compare_fingerprints(table.fingerprint, fingerprint, str(p), other, refuse)
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
