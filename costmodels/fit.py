"""Fit a predictor on samples and compile it into a calibrated cost table (``servecal fit``).

Steps: deal whole grid points into ``K`` folds; for each fold fit the chosen model
on the other folds and predict the fold's rows (out-of-fold predictions,
:mod:`crossval`); set the conformal margin from every out-of-fold score and
measure the held-out metrics, each fold against a margin blind to it; then fit
the model on every point, evaluate it on every grid cell, fill cells without data
(lookup table only), make every quantile monotone along every axis and uncrossed,
and attach the margin.

Samples that are all medians (one row per point, ``rep == 0``, as importers write
them) give a P50-only table: its tail cannot be learned and it carries no margin.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd

from servecal.costmodels.conformal import conformal_rho
from servecal.costmodels.crossval import cross_conformal, folds_for, out_of_fold, point_folds
from servecal.costmodels.empirical import EmpiricalQuantileTable
from servecal.costmodels.errors import InputError
from servecal.costmodels.evaluate import evaluate, metrics_from_predictions
from servecal.costmodels.gbm import GBMQuantileRegressor
from servecal.costmodels.grid import (
    FEATURES,
    choose_axes,
    fill_holes,
    grid_features,
    grid_shape,
    make_monotone,
    settle_empty_iteration,
    uncross,
)
from servecal.costmodels.physics import PhysicsQuantileRegressor
from servecal.costmodels.predictor import Predictor
from servecal.costmodels.samples import POINT_COLUMNS, check_samples
from servecal.costmodels.table import AXES, CostTable, Margin

MODELS = ("table", "linear", "lgbm")
#: ``auto`` uses the lookup table when at least this fraction of grid cells is measured
#: and points have at least :data:`TABLE_MIN_REPEATS` repeats.
TABLE_MIN_FILL = 0.8
TABLE_MIN_REPEATS = 10
#: ``auto`` uses LightGBM for irregular designs with at least this many points.
LGBM_MIN_POINTS = 200


class TailWarning(UserWarning):
    """The samples carry no repeats, so only a P50 table can be fitted."""


@dataclass(frozen=True)
class FitResult:
    """The compiled table, its held-out metrics, which model was used, and why."""

    table: CostTable
    metrics: dict[str, Any]
    model: str
    reason: str
    notes: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class DataShape:
    """What the samples look like, for choosing a model."""

    points: int
    median_repeats: float
    grid_fill: float
    medians_only: bool


def meaningful_cells(axes: Mapping[str, Sequence[int]]) -> int:
    """Grid cells a design needs to measure: not the empty iteration, and (as the
    profiler's designs do) ``ctx`` only at its first value when nothing decodes and
    ``prefix`` only at its first value when nothing prefills: it does not matter then."""
    X = grid_features(axes)
    n, c = X[:, FEATURES.index("n_decode")], X[:, FEATURES.index("chunk")]
    ctx, prefix = X[:, FEATURES.index("ctx")], X[:, FEATURES.index("prefix")]
    idle_ctx = (n == 0) & (ctx != axes["ctx"][0])
    idle_prefix = (c == 0) & (prefix != axes["prefix"][0])
    return max(1, int(np.sum(~((n + c == 0) | idle_ctx | idle_prefix))))


def describe_samples(frame: pd.DataFrame, axes: Mapping[str, Sequence[int]]) -> DataShape:
    counts = frame.groupby(list(POINT_COLUMNS), sort=False).size()
    cells = meaningful_cells(axes)
    medians_only = bool((counts == 1).all() and (frame["rep"] == 0).all())
    return DataShape(
        points=int(counts.size),
        median_repeats=float(counts.median()),
        grid_fill=min(1.0, counts.size / cells),
        medians_only=medians_only,
    )


def choose_model(shape: DataShape) -> tuple[str, str]:
    """The model ``--model auto`` picks, and a sentence saying why."""
    regular = shape.grid_fill >= TABLE_MIN_FILL
    if regular and (shape.medians_only or shape.median_repeats >= TABLE_MIN_REPEATS):
        return "table", (
            f"regular grid ({shape.grid_fill:.0%} of cells measured) with "
            f"{shape.median_repeats:g} rows per point: empirical quantiles per point"
        )
    if not regular and shape.points >= LGBM_MIN_POINTS:
        return "lgbm", (
            f"irregular design ({shape.grid_fill:.0%} of cells measured, "
            f"{shape.points} points): gradient-boosted quantiles"
        )
    return "linear", (
        f"sparse data ({shape.points} points, {shape.median_repeats:g} rows per point): "
        "physics-shaped quantile regression"
    )


def _make_model(kind: str, axes: dict[str, list[int]], quantiles: Sequence[float], seed: int):
    if kind == "table":
        return EmpiricalQuantileTable(axes=axes, quantiles=quantiles)
    if kind == "linear":
        return PhysicsQuantileRegressor(quantiles=quantiles, rng=np.random.default_rng(seed))
    return GBMQuantileRegressor(quantiles=quantiles, seed=seed)


def _compile(model: Any, axes: dict[str, list[int]]) -> dict[float, np.ndarray]:
    """Every quantile on the grid: holes filled, monotone on every axis, uncrossed."""
    shape = grid_shape(axes)
    raw = model.predict_quantiles(grid_features(axes))
    return uncross(
        {
            q: make_monotone(settle_empty_iteration(fill_holes(v.reshape(shape), axes), axes))
            for q, v in raw.items()
        }
    )


def _check_args(model: str, quantiles: Sequence[float], fold_share: float) -> tuple[float, ...]:
    if model not in (*MODELS, "auto"):
        raise InputError(f"--model: unknown model '{model}' (choose {', '.join(MODELS)}, auto)")
    qs = tuple(sorted({float(q) for q in quantiles}))
    if not qs or not all(0.0 < q < 1.0 for q in qs):
        raise InputError(f"--quantiles: each quantile must be in (0, 1), got {list(quantiles)}")
    if not 0.0 < fold_share < 1.0:
        raise InputError(f"--fold-share: must be in (0, 1), got {fold_share}")
    return qs


def fit_cost_table(
    frame: pd.DataFrame,
    provenance: dict[str, Any],
    model: str = "auto",
    quantiles: Sequence[float] = (0.5, 0.99),
    fold_share: float = 0.2,
    seed: int = 0,
    grid: Mapping[str, Sequence[int]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> FitResult:
    """Fit ``model`` on ``frame`` and compile a calibrated :class:`CostTable`.

    ``fold_share`` is the share of grid points each cross-validation fold holds out
    (``round(1 / fold_share)`` folds; see :mod:`crossval`); every point is held out
    by exactly one fold.

    The margin is calibrated for the highest quantile above 0.5 (the *tail*, normally
    0.99) at coverage equal to that quantile. ``grid`` overrides axis values
    (``{"chunk": [...], ...}``); other axes come from the samples.
    """
    say = progress or (lambda _msg: None)
    qs = _check_args(model, quantiles, fold_share)
    source = str(provenance.get("source", "samples"))
    provenance = {k: v for k, v in provenance.items() if k != "source"}
    frame = check_samples(frame, source)
    points = {a: frame[a].to_numpy() for a in AXES}
    axes = choose_axes(points, grid)
    shape = describe_samples(frame, axes)
    notes: list[str] = []
    if shape.medians_only:
        msg = "samples are medians only (one row per point, rep 0): P50 table, no tail/margin"
        warnings.warn(msg, TailWarning, stacklevel=2)
        notes.append(msg)
        qs = (0.5,)
    tail = max((q for q in qs if q > 0.5), default=None)
    kind, reason = choose_model(shape) if model == "auto" else (model, "chosen with --model")
    rng = np.random.default_rng(seed)
    ids = frame.groupby(list(POINT_COLUMNS), sort=False).ngroup().to_numpy()
    k = folds_for(fold_share, shape.points)
    folds = point_folds(ids, k, rng)
    X = frame[list(FEATURES)].to_numpy(dtype=float)
    y = frame["ms"].to_numpy(dtype=float)
    query = [X[:, k] for k in range(len(FEATURES))]  # predict()'s argument order

    def fit_grid(rows: np.ndarray) -> dict[float, np.ndarray]:
        fitted = _make_model(kind, axes, qs, int(rng.integers(2**31))).fit(X[rows], y[rows])
        return _compile(fitted, axes)

    def predict_fold(train: np.ndarray, test: np.ndarray):
        bare = CostTable(axes=axes, quantiles=fit_grid(train))
        return {q: bare.lookup(q, *(col[test] for col in query)) for q in qs}

    oof = out_of_fold(folds, qs, predict_fold, say)
    bound = cc = None
    if tail is not None:
        tail_oof = oof.predictions[tail]
        cc = cross_conformal(y / tail_oof - 1.0, folds, tail)
        bound = tail_oof + cc.rho_blind * tail_oof  # as predict() + margin() add them
        if not cc.nested:
            notes.append(
                "few rows per fold: the held-out coverage is measured with the margin of "
                "all folds, so it is not independent of it"
            )
    metrics = metrics_from_predictions(frame, oof.predictions, bound, oof.clamped)

    say(f"fitting {kind} on all {len(frame)} rows")
    fitted = _make_model(kind, axes, qs, int(rng.integers(2**31))).fit(X, y)
    values = _compile(fitted, axes)
    every = np.ones(len(frame), dtype=bool)
    energy = _fit_energy(frame, every, kind, axes, int(rng.integers(2**31)))
    info: dict[str, Any] = {
        "kind": kind,
        "reason": reason,
        "samples": source,
        "seed": seed,
        "holdout": fold_share,  # the JSON key of tables since 0.1 (the fold share)
        "quantiles": list(qs),
    }
    if hasattr(fitted, "describe"):
        info["coefficients"] = fitted.describe()
    margin = None
    if tail is not None and cc is not None:
        margin = Margin(
            quantile=tail,
            rho=cc.rho,
            target=tail,
            validated_coverage=metrics["p99_coverage"],
            calibration_points=shape.points,
            calibration_rows=len(frame),
            score="ms / p_tail - 1 (out-of-fold)",
        )
    validation = {
        "method": f"{k}-fold cross-validation over grid points",
        "folds": k,
        "points": shape.points,
        **_jsonable(metrics),
    }
    table = CostTable(
        axes=axes,
        quantiles=values,
        margin=margin,
        energy_j=energy,
        fingerprint=provenance,
        model=info,
        validation=validation,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    return FitResult(table=table, metrics=metrics, model=kind, reason=reason, notes=tuple(notes))


def compile_predictor(
    predictor: Predictor,
    axes: Mapping[str, Sequence[int]],
    quantiles: Sequence[float] = (0.5, 0.99),
    calibration: pd.DataFrame | None = None,
    fingerprint: Mapping[str, Any] | None = None,
) -> CostTable:
    """Compile any predictor (e.g. :class:`AnalyticPredictor`) into a cost table on ``axes``.

    The grid goes through the same monotone and uncrossing steps as a fit. With
    ``calibration`` rows (samples of the real device), the highest quantile gets a
    split-conformal margin from them (all rows calibrate: none is left to test it);
    without, the table has no margin (``tail`` null).
    """
    axes = {a: sorted({int(v) for v in axes[a]}) for a in AXES}
    shape = grid_shape(axes)
    X = grid_features(axes)
    cols = [X[:, FEATURES.index(f)] for f in FEATURES]
    raw = {
        float(q): np.asarray(predictor.predict(*cols, q=float(q)), dtype=float) for q in quantiles
    }
    values = uncross({q: make_monotone(v.reshape(shape)) for q, v in raw.items()})
    common = dict(
        axes=axes,
        quantiles=values,
        fingerprint=dict(fingerprint or {}),
        model={"kind": type(predictor).__name__, "reason": "compiled predictor"},
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    tail = max((q for q in values if q > 0.5), default=None)
    if calibration is None or tail is None:
        return CostTable(**common)
    frame = check_samples(calibration, "calibration samples")
    bare = CostTable(**common)
    tail_values, _ = bare.lookup(tail, *(frame[c].to_numpy(dtype=float) for c in FEATURES))
    scores = frame["ms"].to_numpy() / tail_values - 1.0
    points = int(frame.groupby(list(POINT_COLUMNS)).ngroups)
    margin = Margin(tail, conformal_rho(scores, tail), tail, None, points, len(frame))
    table = CostTable(margin=margin, **common)
    metrics = evaluate(table, frame)
    return CostTable(margin=margin, validation=_jsonable(metrics), **common)


def _fit_energy(
    frame: pd.DataFrame, train: np.ndarray, kind: str, axes: dict[str, list[int]], seed: int
) -> np.ndarray | None:
    """Median energy per iteration on the grid, or None when no row has a meter reading."""
    energy = frame["energy_j"].to_numpy(dtype=float)
    rows = train & ~np.isnan(energy)
    if not rows.any():
        return None
    X = frame[list(FEATURES)].to_numpy(dtype=float)[rows]
    fitted = _make_model(kind, axes, (0.5,), seed).fit(X, energy[rows])
    return _compile(fitted, axes)[0.5]


def _jsonable(metrics: dict[str, Any]) -> dict[str, Any]:
    out = dict(metrics)
    out["pinball"] = {repr(q): v for q, v in metrics["pinball"].items()}
    return out
