"""Fit a predictor on samples and compile it into a calibrated cost table (``servecal fit``).

Steps: deal whole grid points into ``K`` folds; for each candidate model (one with
``--family``, every applicable one with ``auto``) and each fold, fit the model on the
other folds, compile it into a table and predict the fold's rows (out-of-fold
predictions, :mod:`crossval`); score each candidate on them and keep the best
(:mod:`select`). With the kept model: set the conformal margin from every
out-of-fold score and measure the held-out metrics, each fold against a margin
blind to it; then fit it on every point, evaluate it on every grid cell, fill cells
without data (lookup table only), make every quantile monotone along every axis and
uncrossed, and attach the margin.

Samples that are all medians (one row per point, ``rep == 0``, as importers write
them) give a P50-only table: its tail cannot be learned and it carries no margin.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd

from servecal.costmodels.candidates import MODELS, candidate, make_model, model_seed
from servecal.costmodels.compiled import CompiledTableRegressor, compile_quantiles
from servecal.costmodels.conformal import conformal_rho
from servecal.costmodels.crossval import (
    CrossConformal,
    PointFolds,
    cross_conformal,
    folds_for,
    out_of_fold,
    point_folds,
)
from servecal.costmodels.drift.reference import CALIBRATION_MEDIANS, calibration_medians
from servecal.costmodels.evaluate import evaluate, metrics_from_predictions, pinball_losses
from servecal.costmodels.grid import (
    FEATURES,
    choose_axes,
    grid_features,
    grid_shape,
    make_monotone,
    uncross,
)
from servecal.costmodels.predictor import Predictor
from servecal.costmodels.samples import POINT_COLUMNS, check_samples
from servecal.costmodels.select import RULE, Trial, choose, trial_record
from servecal.costmodels.table import AXES, CostTable, Margin
from servecal.util.errors import InputError

__all__ = ["MODELS", "FitResult", "TailWarning", "compile_predictor", "fit_cost_table"]


class TailWarning(UserWarning):
    """The samples carry no repeats, so only a P50 table can be fitted."""


@dataclass(frozen=True)
class FitResult:
    """The compiled table, its held-out metrics, which model was used, and why.

    ``trials``: every candidate's cross-validation (one with ``--family``)."""

    table: CostTable
    metrics: dict[str, Any]
    model: str
    reason: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    trials: tuple[Trial, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class DataShape:
    """What the samples look like (recorded with the table; cross-validation picks the model)."""

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


def _check_args(model: str, quantiles: Sequence[float], fold_share: float) -> tuple[float, ...]:
    if model not in (*MODELS, "auto"):
        raise InputError(
            f"--family: unknown regression family '{model}' (choose {', '.join(MODELS)}, auto)"
        )
    qs = tuple(sorted({float(q) for q in quantiles}))
    if not qs or not all(0.0 < q < 1.0 for q in qs):
        raise InputError(f"--quantiles: each quantile must be in (0, 1), got {list(quantiles)}")
    if not 0.0 < fold_share < 1.0:
        raise InputError(f"--fold-share: must be in (0, 1), got {fold_share}")
    return qs


@dataclass(frozen=True)
class _Fitting:
    """What every candidate's cross-validation shares: the rows, grid and folds."""

    frame: pd.DataFrame
    X: np.ndarray
    y: np.ndarray
    axes: dict[str, list[int]]
    quantiles: tuple[float, ...]
    tail: float | None
    folds: PointFolds
    points: np.ndarray  # point id of each row
    seed: int
    given: frozenset[str]  # axes the caller gave (``grid``): never reduced

    def compiled(self, kind: str, fold: int) -> CompiledTableRegressor:
        """``kind`` (unfitted) as the table it compiles to; ``fold`` picks its seed
        (:func:`model_seed`: 0 for every cross-validation fold, K for the final fit)."""
        model = make_model(kind, self.axes, self.quantiles, model_seed(self.seed, kind, fold))
        return CompiledTableRegressor(model, axes=self.axes, keep=self.given)

    def cross_validate(
        self, kind: str, say: Callable[[str], None]
    ) -> tuple[Trial, CrossConformal | None]:
        """``kind``'s out-of-fold predictions through compiled tables, and its metrics."""
        start = time.perf_counter()
        k = len(self.folds.splits)
        done = iter(range(1, k + 1))

        def on_fit(_rows: int) -> None:
            say(f"{kind}: cross-validating: fold {next(done, k)}/{k}")

        compiled = self.compiled(kind, 0).set_params(on_fit=on_fit)
        oof = out_of_fold(compiled, self.X, self.y, self.folds, self.quantiles)
        bound = cc = None
        if self.tail is not None:
            tail_oof = oof.predictions[self.tail]
            if not np.all(tail_oof > 0):  # no margin is a share of a time <= 0
                row = self.X[np.argmin(tail_oof)].astype(int).tolist()
                at = dict(zip(FEATURES, row, strict=True))
                raise ValueError(
                    f"{kind} predicts a P{100 * self.tail:g} of {np.min(tail_oof):.3g} ms at "
                    f"held-out point {at}"
                )
            cc = cross_conformal(self.y / tail_oof - 1.0, self.folds.folds, self.tail)
            bound = tail_oof + cc.rho_blind * tail_oof  # as predict() + margin() add them
        metrics = metrics_from_predictions(self.frame, oof.predictions, bound, oof.clamped)
        row_loss = np.mean(
            [pinball_losses(self.y, oof.predictions[q], q) for q in self.quantiles], axis=0
        )
        point_loss = np.bincount(self.points, weights=row_loss) / row_loss.size
        return Trial(kind, time.perf_counter() - start, metrics, point_loss=point_loss), cc


def _run_trials(
    fitting: _Fitting, model: str, say: Callable[[str], None]
) -> tuple[list[Trial], dict[str, CrossConformal | None]]:
    """Cross-validate ``model`` (or, for ``auto``, every applicable candidate; one that
    fails is recorded as skipped with the reason) and keep each one's margin."""
    trials: list[Trial] = []
    conformal: dict[str, CrossConformal | None] = {}
    for name in MODELS if model == "auto" else (model,):
        why_not = candidate(name).not_applicable(fitting.X) if model == "auto" else None
        if why_not is not None:
            trials.append(Trial(name, 0.0, skipped=why_not))
            continue
        try:
            trial, conformal[name] = fitting.cross_validate(name, say)
        except InputError:
            raise  # the samples' fault (e.g. too few rows for the margin): every model's
        except ValueError as exc:
            if model != "auto":
                raise
            trial = Trial(name, 0.0, skipped=f"failed: {exc}")  # e.g. an LP that did not solve
        trials.append(trial)
    return trials, conformal


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

    ``model="auto"`` cross-validates every applicable model of :data:`MODELS` on the
    same folds and keeps the one with the lowest out-of-fold pinball loss
    (:mod:`select`); its cost is the candidates' cross-validations plus one final fit,
    never more than fitting each candidate with ``--family``. ``fold_share`` is the
    share of grid points each cross-validation fold holds out (``round(1 / fold_share)``
    folds; see :mod:`crossval`); every point is held out by exactly one fold.

    The margin is calibrated for the highest quantile above 0.5 (the *tail*, normally
    0.99) at coverage equal to that quantile. ``grid`` overrides axis values
    (``{"chunk": [...], ...}``); other axes come from the samples. A model whose
    surface bends or jumps between those values adds its breakpoints to the grid; one
    affine along an axis taken from the samples keeps only that axis's two ends.
    """
    say = progress or (lambda _msg: None)
    qs = _check_args(model, quantiles, fold_share)
    source = str(provenance.get("source", "samples"))
    provenance = {k: v for k, v in provenance.items() if k != "source"}
    frame = check_samples(frame, source)
    points = {a: frame[a].to_numpy() for a in AXES}
    axes = choose_axes(points, grid)
    shape = describe_samples(frame, axes)
    qs, tail, notes = _quantiles_for(shape, qs)
    ids = frame.groupby(list(POINT_COLUMNS), sort=False).ngroup().to_numpy()
    k = folds_for(fold_share, shape.points)
    fitting = _Fitting(
        frame=frame,
        X=frame[list(FEATURES)].to_numpy(dtype=float),
        y=frame["ms"].to_numpy(dtype=float),
        axes=axes,
        quantiles=qs,
        tail=tail,
        folds=point_folds(ids, k, seed),
        points=ids,
        seed=seed,
        given=frozenset(grid or ()),
    )

    trials, conformal = _run_trials(fitting, model, say)
    kind, reason = choose(trials) if model == "auto" else (model, "chosen with --family")
    trial = next(t for t in trials if t.name == kind)
    metrics, cc = dict(trial.metrics), conformal[kind]
    if cc is not None and not cc.nested:
        notes.append(
            "few rows per fold: the held-out coverage is measured with the margin of "
            "all folds, so it is not independent of it"
        )

    say(f"fitting {kind} on all {len(frame)} rows")
    start = time.perf_counter()
    final = fitting.compiled(kind, k).fit(fitting.X, fitting.y)
    fitted, table_axes = final.model_, final.grid_
    values = final.values_
    energy = _fit_energy(frame, kind, table_axes, model_seed(seed, kind, k + 1))
    final_s = time.perf_counter() - start
    info = _model_info(kind, reason, source, seed, fold_share, qs, model, k, shape.points,
                       trials, final_s, fitted)  # fmt: skip
    margin = None
    if tail is not None and cc is not None:
        margin = _margin(tail, cc.rho, metrics["p99_coverage"], shape.points, len(frame))
    validation = {
        "method": f"{k}-fold cross-validation over grid points",
        "folds": k,
        "points": shape.points,
        **_jsonable(metrics),
        CALIBRATION_MEDIANS: calibration_medians(frame),
    }
    table = CostTable(
        axes=table_axes,
        quantiles=values,
        margin=margin,
        energy_j=energy,
        fingerprint=provenance,
        model=info,
        validation=validation,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    return FitResult(
        table=table,
        metrics=metrics,
        model=kind,
        reason=reason,
        notes=tuple(notes),
        trials=tuple(trials),
    )


def _quantiles_for(
    shape: DataShape, qs: tuple[float, ...]
) -> tuple[tuple[float, ...], float | None, list[str]]:
    """The quantiles the samples can support, the tail among them (the highest above
    0.5, or ``None``), and a note when medians-only samples leave P50 alone (warned)."""
    notes: list[str] = []
    if shape.medians_only:
        msg = "samples are medians only (one row per point, rep 0): P50 table, no tail/margin"
        warnings.warn(msg, TailWarning, stacklevel=3)  # fit_cost_table's caller
        notes.append(msg)
        qs = (0.5,)
    return qs, max((q for q in qs if q > 0.5), default=None), notes


def _model_info(
    kind: str,
    reason: str,
    source: str,
    seed: int,
    fold_share: float,
    qs: Sequence[float],
    model: str,
    k: int,
    points: int,
    trials: Sequence[Trial],
    final_s: float,
    fitted: Any,
) -> dict[str, Any]:
    """What the table records as its ``model``: the kept family and why, the samples,
    the seed and folds, every candidate's trial, and the fitted coefficients."""
    info: dict[str, Any] = {
        "kind": kind,
        "reason": reason,
        "samples": source,
        "seed": seed,
        "holdout": fold_share,  # the fold share, under the key table readers look up
        "quantiles": list(qs),
        "selection": {
            "rule": RULE if model == "auto" else f"--family {model}",
            "folds": k,
            "points": points,
            "candidates": [trial_record(t) for t in trials],
            "final_fit_s": round(final_s, 3),
        },
    }
    if hasattr(fitted, "describe"):
        info["coefficients"] = fitted.describe()
    return info


def _margin(tail: float, rho: float, coverage: float, points: int, rows: int) -> Margin:
    """The conformal margin of the tail quantile, with the coverage cross-validation measured."""
    return Margin(
        quantile=tail,
        rho=rho,
        target=tail,
        validated_coverage=coverage,
        calibration_points=points,
        calibration_rows=rows,
        score="ms / p_tail - 1 (out-of-fold)",
    )


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
    frame: pd.DataFrame, kind: str, axes: dict[str, list[int]], seed: int
) -> np.ndarray | None:
    """Median energy per iteration on ``axes`` (the time table's grid), or None when no
    row has a meter reading."""
    energy = frame["energy_j"].to_numpy(dtype=float)
    rows = ~np.isnan(energy)
    if not rows.any():
        return None
    X = frame[list(FEATURES)].to_numpy(dtype=float)[rows]
    fitted = make_model(kind, axes, (0.5,), seed).fit(X, energy[rows])
    return compile_quantiles(fitted, axes)[0.5]


def _jsonable(metrics: dict[str, Any]) -> dict[str, Any]:
    out = dict(metrics)
    out["pinball"] = {repr(q): v for q, v in metrics["pinball"].items()}
    return out
