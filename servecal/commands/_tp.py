"""The TP-degree check shared by ``simulate --predictor`` and ``validate`` (one warning line)."""

from __future__ import annotations

import json
from pathlib import Path

from servecal.costmodels.errors import InputError
from servecal.costmodels.parallelism import samples_tp, tp_mismatch

SAMPLES_TRUTH = "samples:"


def truth_tp(truth: str, backend: str = "engine") -> int | None:
    """TP degree of a run's iterations: the torch backend's model is one device (TP 1);
    a ``samples:PATH`` truth replays samples of their TP; an analytic truth has none."""
    if backend == "torch":
        return 1
    if truth.startswith(SAMPLES_TRUTH):
        return samples_tp(truth[len(SAMPLES_TRUTH) :])
    return None


def simulate_warning(predictor: str, truth: str, backend: str) -> str | None:
    """Warning when ``--predictor`` is a cost table of another TP than the run's iterations."""
    if predictor == "oracle" or not Path(predictor).is_file():
        return None  # load_predictor reports a bad spec
    from servecal.costmodels import CostTable

    table = CostTable.load(predictor)
    return tp_mismatch(predictor, table.tp, "the run", truth_tp(truth, backend))


def validate_warning(table_path: Path, table_tp: int, measurements: Path) -> str | None:
    """Warning when the measurements (samples, or a run folder) are of another TP."""
    if measurements.is_dir():
        try:
            config = json.loads((measurements / "run.json").read_text())["config"]
            backend = config.get("backend", "torch" if config.get("executor") == "torch" else "")
            other = truth_tp(config.get("truth", ""), backend)
        except (OSError, ValueError, KeyError, TypeError, InputError):
            return None  # a damaged run folder (reported elsewhere) or its truth file gone
        return tp_mismatch(table_path, table_tp, f"the run {measurements}", other)
    return tp_mismatch(table_path, table_tp, f"{measurements}", samples_tp(measurements))
