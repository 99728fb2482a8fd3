"""The models ``servecal fit`` can compile a table from, and when each applies.

Every model is a scikit-learn regressor (:mod:`~servecal.costmodels.estimator`:
hyper-parameters in the constructor, ``random_state`` for its seed, ``fit(X, y,
sample_weight=None)`` returns the fitted model, ``clone`` gives an unfitted copy)
and answers ``predict_quantiles(X) -> {q: values}``; a model whose
surface bends or jumps between grid values also has ``breakpoints()``
(``{axis: [values]}``), which the compiler adds to the table's grid.

To add a model: write the estimator and add one :class:`Candidate` to
:data:`CANDIDATES`.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servecal.costmodels.empirical import EmpiricalQuantileTable
from servecal.costmodels.gbm import GBMQuantileRegressor
from servecal.costmodels.physics import PhysicsQuantileRegressor
from servecal.costmodels.piecewise import PiecewiseQuantileRegressor
from servecal.plugins import Registry

Axes = Mapping[str, Sequence[int]]


def _piecewise_not_applicable(X: np.ndarray) -> str | None:
    """With at most two distinct positive values of both ``n_decode`` and ``chunk``
    there is one segment per axis: ``linear`` plus tile steps two values cannot place."""
    distinct = [np.unique(X[:, k][X[:, k] > 0]).size for k in (0, 1)]
    if max(distinct) <= 2:
        return (
            f"{distinct[0]} positive n_decode and {distinct[1]} chunk values: "
            "no knee or step can be placed (it would be linear)"
        )
    return None


@dataclass(frozen=True)
class Candidate:
    """A model ``fit`` can compile: its name, one sentence, its estimator class (an
    import path), and how to build it (unfitted) from the grid axes, the quantiles
    and a seed."""

    name: str
    summary: str
    target: str  # the estimator class, "module:Class" (what ``servecal plugins`` names)
    build: Callable[[Axes, Sequence[float], int], Any]
    #: Why ``auto`` skips it on these feature rows (``None``: it applies).
    not_applicable: Callable[[np.ndarray], str | None] = lambda _X: None
    usage: str = ""
    number: str | None = None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "usage": self.name, "summary": self.summary}


#: Every model, in the order ``auto`` tries them (and breaks exact ties).
CANDIDATES = Registry(
    "fit model", "--family", "a scikit-learn quantile regressor (fit)", user_form=""
)
for _candidate in (
    Candidate(
        "table",
        "empirical quantiles per grid cell (tail pooled over neighbours)",
        "servecal.costmodels.empirical:EmpiricalQuantileTable",
        lambda axes, qs, seed: EmpiricalQuantileTable(axes=axes, quantiles=qs),
    ),
    Candidate(
        "linear",
        "physics-shaped linear quantile regression (7 non-negative terms)",
        "servecal.costmodels.physics:PhysicsQuantileRegressor",
        lambda axes, qs, seed: PhysicsQuantileRegressor(qs, random_state=seed),
    ),
    Candidate(
        "piecewise",
        "physics-shaped piecewise quantile regression (token-cost knees, tile steps)",
        "servecal.costmodels.piecewise:PiecewiseQuantileRegressor",
        lambda axes, qs, seed: PiecewiseQuantileRegressor(qs, random_state=seed),
        _piecewise_not_applicable,
    ),
    Candidate(
        "lgbm",
        "LightGBM quantile regression, made monotone on the grid",
        "servecal.costmodels.gbm:GBMQuantileRegressor",
        lambda axes, qs, seed: GBMQuantileRegressor(quantiles=qs, random_state=seed),
    ),
):
    CANDIDATES.add_entry(_candidate)
MODELS = tuple(c.name for c in CANDIDATES)


def candidate(name: str) -> Candidate:
    """The candidate called ``name`` (KeyError if none)."""
    return CANDIDATES.entries[name]  # type: ignore[return-value]


def model_seed(seed: int, kind: str, fold: int) -> int:
    """``kind``'s ``random_state``: ``fold = 0`` for its cross-validation fits (one seed
    for every fold, as ``cross_val_predict`` clones one estimator), ``fold = K`` for
    its fit on every point, ``K + 1`` for the energy table.

    Derived from the names, not drawn in sequence, so a model's tables are the same
    whether ``auto`` fitted it among others or ``--family`` alone.
    """
    return int(np.random.default_rng([seed, zlib.crc32(kind.encode()), fold]).integers(2**31))


def make_model(kind: str, axes: Axes, quantiles: Sequence[float], seed: int) -> Any:
    """An unfitted estimator of ``kind``."""
    return candidate(kind).build(axes, quantiles, seed)
