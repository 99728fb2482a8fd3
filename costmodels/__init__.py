"""costmodels: samples, iteration-cost predictors, cost tables and drift (the ground floor).

Imports nothing from the other stages. Importing this package loads only numpy and
the standard library (a server loads cost tables without pandas, sklearn or
lightgbm); the fitting and samples helpers are imported lazily on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from servecal.costmodels.analytic import AnalyticPredictor
from servecal.costmodels.predictor import PLAN_QUANTILE, Predictor, largest_fitting
from servecal.costmodels.table import CostTable, MissingQuantileError
from servecal.util.errors import InputError

#: Names loaded on first access (they pull in pandas / scikit-learn / lightgbm).
#: (``evaluate`` is not here: it is also the name of its submodule; import it from
#: ``servecal.costmodels.evaluate``.)
_LAZY = {
    "Samples": "servecal.costmodels.samples",
    "read_samples": "servecal.costmodels.samples",
    "write_samples": "servecal.costmodels.samples",
    "check_samples": "servecal.costmodels.samples",
    "fit_cost_table": "servecal.costmodels.fit",
    "FitResult": "servecal.costmodels.fit",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'servecal.costmodels' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "AnalyticPredictor",
    "CostTable",
    "InputError",
    "MissingQuantileError",
    "PLAN_QUANTILE",
    "Predictor",
    "largest_fitting",
    *_LAZY,
]
