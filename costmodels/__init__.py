"""costmodels: samples, iteration-cost predictors, cost tables and drift (the ground floor).

Imports nothing from the other stages.
"""

from servecal.costmodels.analytic import AnalyticPredictor
from servecal.costmodels.errors import InputError
from servecal.costmodels.predictor import PLAN_QUANTILE, Predictor, largest_fitting

__all__ = ["AnalyticPredictor", "InputError", "PLAN_QUANTILE", "Predictor", "largest_fitting"]
