"""One call to put a run under drift watch: what an engine or a command needs.

    predictor, monitor = watch(predictor, adaptive=True)
    Engine(..., predictor, ..., observers=[monitor])

The monitor's noise profile comes from the predictor's own P50→P99 spread
(:meth:`NoiseProfile.from_predictor`) unless one from calibration residuals is
given; a cost table's median is interpolated (``reference.TableMedian``).
"""

from __future__ import annotations

from typing import Any

from servecal.costmodels.drift.adaptive import AdaptiveConfig, AdaptiveMargin
from servecal.costmodels.drift.monitor import DriftConfig, DriftMonitor
from servecal.costmodels.drift.profile import NoiseProfile
from servecal.costmodels.drift.reference import reference_for

#: (n_decode, chunk, ctx, prefix) points the spread is read at: small and large
#: batches, decode-only and mixed iterations.
SPREAD_POINTS = tuple((n, c, 512, 0) for n in (1, 8, 32, 128) for c in (0, 256, 1024) if n + c > 0)


def watch(
    predictor: Any,
    adaptive: bool = False,
    profile: NoiseProfile | None = None,
    config: DriftConfig | None = None,
    adaptive_config: AdaptiveConfig | None = None,
) -> tuple[Any, DriftMonitor]:
    """``(predictor to plan with, monitor to attach as observer)``.

    With ``adaptive`` the predictor is wrapped in :class:`AdaptiveMargin` driven
    by the monitor; otherwise it is returned unchanged.
    """
    profile = profile or NoiseProfile.from_predictor(predictor, SPREAD_POINTS)
    monitor = DriftMonitor(profile, config, reference=reference_for(predictor))
    if adaptive:
        return AdaptiveMargin(predictor, monitor, adaptive_config), monitor
    return predictor, monitor
