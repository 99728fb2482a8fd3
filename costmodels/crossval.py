"""Cross-validation over whole grid points: out-of-fold predictions and a cross-conformal margin.

A single train / calibration / test split leaves few test points (a 170-point
calibration held out 11), so its coverage and MAPE swing by several points from
one seed to the next. Here every point is held out once instead:

* the points (never single rows: repeats of one point are correlated) are dealt
  into ``K`` folds at random: scikit-learn's ``GroupKFold`` with the points as
  groups, shuffled;
* for each fold a table is fitted on the other folds and predicts the fold's
  rows (``cross_val_predict`` over a
  :class:`~servecal.costmodels.compiled.CompiledTableRegressor`), so every row gets
  an *out-of-fold* prediction, made by a table that never saw its point;
* the margin is the split-conformal quantile of **all** out-of-fold scores
  ``ms / P_tail − 1`` (a cross-conformal margin, as in CV+);
* the held-out coverage of fold ``k`` is measured with the margin calibrated on
  the *other* folds' scores only, so the coverage reported is never the one the
  margin was tuned on (nested: each row is tested by a margin blind to it).

So the metrics rest on every point, and the final table is fitted on every point.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.model_selection import GroupKFold, cross_val_predict

from servecal.costmodels.conformal import conformal_rho
from servecal.util.errors import InputError

#: Fewest folds (two: each point predicted by a table fitted on the other half).
MIN_FOLDS = 2


def folds_for(holdout: float, points: int) -> int:
    """``K = round(1 / holdout)`` folds (each holds out about ``holdout`` of the points),
    at least :data:`MIN_FOLDS` and at most one per point."""
    if not 0.0 < holdout < 1.0:
        raise ValueError(f"holdout must be in (0, 1), got {holdout}")
    return max(MIN_FOLDS, min(points, round(1.0 / holdout)))


@dataclass(frozen=True)
class PointFolds:
    """The ``(train, test)`` row indices of each fold, and each row's fold number."""

    splits: list[tuple[np.ndarray, np.ndarray]]
    folds: np.ndarray


def point_folds(point_ids: np.ndarray, k: int, seed: int) -> PointFolds:
    """``k`` folds of whole points: ``GroupKFold`` over the shuffled distinct points."""
    unique = np.unique(point_ids)
    if unique.size < max(3, k):
        raise InputError(
            f"samples: column 'n_decode..prefix': need >= {max(3, k)} distinct points to "
            f"cross-validate, got {unique.size}"
        )
    cv = GroupKFold(n_splits=k, shuffle=True, random_state=seed)
    splits = list(cv.split(np.zeros((point_ids.size, 1)), groups=point_ids))
    folds = np.empty(point_ids.size, dtype=np.int64)
    for fold, (_train, test) in enumerate(splits):
        folds[test] = fold
    return PointFolds(splits=splits, folds=folds)


@dataclass(frozen=True)
class OutOfFold:
    """Per row: each quantile's prediction by the table fitted without the row's fold."""

    predictions: dict[float, np.ndarray]
    clamped: np.ndarray


def out_of_fold(
    compiled: Any, X: np.ndarray, y: np.ndarray, folds: PointFolds, quantiles: Sequence[float]
) -> OutOfFold:
    """Out-of-fold ``predict_table`` answers of ``compiled`` (a
    :class:`~servecal.costmodels.compiled.CompiledTableRegressor`), one fit per fold."""
    answers = clone(compiled).set_params(outputs="table")
    table = cross_val_predict(answers, X, y, cv=folds.splits)
    ordered = sorted(float(q) for q in quantiles)
    preds = {q: table[:, j] for j, q in enumerate(ordered)}
    return OutOfFold(predictions=preds, clamped=table[:, -1] > 0)


@dataclass(frozen=True)
class CrossConformal:
    """The margin ``rho`` from all scores, and per row the ``rho`` blind to its fold."""

    rho: float
    rho_blind: np.ndarray
    nested: bool


def cross_conformal(scores: np.ndarray, folds: np.ndarray, target: float) -> CrossConformal:
    """Cross-conformal ``rho`` (all scores) and, per row, the one computed without the
    row's fold. When the other folds hold too few rows to certify ``target`` the
    blind margin falls back to the full one (``nested`` false: say so)."""
    rho = conformal_rho(scores, target)
    blind = np.full(scores.size, rho)
    nested = True
    for fold in np.unique(folds):
        mask = folds == fold
        try:
            blind[mask] = conformal_rho(scores[~mask], target)
        except InputError:
            nested = False
            blind[mask] = rho
    return CrossConformal(rho=rho, rho_blind=blind, nested=nested)
