"""Online validation of a cost table: drift detection, adaptive margins, replay.

* :class:`DriftMonitor` — streaming CUSUM / tail tests on prediction vs actual,
  per-region attribution, ``ok → warn → drift`` states (an engine observer);
* :class:`AdaptiveMargin` — a predictor wrapper whose margin adapts by quantile
  tracking while drift is detected; the base table is never rewritten;
* :func:`watch` — monitor (and optionally adaptive margin) for a predictor, in one call;
* ``replay.replay`` — feed stored measurements (samples or a run) through a
  monitor against a table: what ``servecal validate`` runs.
"""

from servecal.costmodels.drift.adaptive import AdaptiveConfig, AdaptiveMargin
from servecal.costmodels.drift.attach import watch
from servecal.costmodels.drift.monitor import DriftConfig, DriftMonitor
from servecal.costmodels.drift.profile import NoiseProfile
from servecal.costmodels.drift.regions import RegionGrid

__all__ = [
    "AdaptiveConfig",
    "AdaptiveMargin",
    "DriftConfig",
    "DriftMonitor",
    "NoiseProfile",
    "RegionGrid",
    "watch",
]
