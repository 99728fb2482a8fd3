"""Host overhead of an eager engine: the time a step spends outside the GPU kernels.

A composed table prices the kernels. An engine that launches them from Python, one
by one (Sarathi-Serve, Splitwise's vLLM, any non-graph run) adds time the kernels do
not show: a floor below which a step cannot go however little the GPU works (launch
and synchronisation cost, flat across TP), a fixed per-step cost (scheduling, input
preparation, sampling) and a cost per request in the batch (its metadata, its sampled
token). The model:

    step = max(GPU, floor) + c0 + c1 · n        (n = requests in the batch:
                                                 decodes + 1 if a prefill chunk)

Its three parameters come from a small JSON file (``floor_ms``, ``c0_ms``, ``c1_ms``)
or are fitted (:func:`fit_overhead`) from measured steps (a CSV with ``n_decode,
chunk, ctx, prefix, ms``) against the composed GPU time of the same steps.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from servecal.costmodels.errors import InputError

#: Columns of a measured-steps CSV (``ms``: the step as the engine measured it).
STEP_COLUMNS = ("n_decode", "chunk", "ctx", "prefix", "ms")
PARAMETERS = ("floor_ms", "c0_ms", "c1_ms")


@dataclass(frozen=True)
class HostOverhead:
    """``step = max(GPU, floor_ms) + c0_ms + c1_ms · n`` (all ms, all >= 0)."""

    floor_ms: float = 0.0
    c0_ms: float = 0.0
    c1_ms: float = 0.0

    def __post_init__(self) -> None:
        for name in PARAMETERS:
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0:
                raise InputError(f"engine overhead: {name} must be a finite number >= 0")

    def step_ms(self, gpu_ms: Any, requests: Any) -> np.ndarray:
        """Predicted step times for GPU times ``gpu_ms`` and batch sizes ``requests``."""
        gpu = np.asarray(gpu_ms, dtype=float)
        n = np.asarray(requests, dtype=float)
        return np.maximum(gpu, self.floor_ms) + self.c0_ms + self.c1_ms * n

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}

    def write(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        tmp.replace(path)


def requests_in_batch(n_decode: Any, chunk: Any) -> np.ndarray:
    """Requests a step serves: its decodes plus one for a prefill chunk."""
    return np.asarray(n_decode, dtype=float) + (np.asarray(chunk) > 0)


def read_parameters(path: Path) -> HostOverhead:
    """A JSON object with ``floor_ms``, ``c0_ms``, ``c1_ms`` (missing keys: 0)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read engine overhead ({type(exc).__name__})") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON (line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object with {', '.join(PARAMETERS)}")
    unknown = sorted(set(data) - set(PARAMETERS))
    if unknown:
        raise InputError(f"{path}: unknown key {unknown[0]!r}; expected {', '.join(PARAMETERS)}")
    values = {}
    for key in PARAMETERS:
        value = data.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InputError(f"{path}: {key} must be a number, got {value!r}")
        values[key] = float(value)
    return HostOverhead(**values)


def read_steps(path: Path) -> pd.DataFrame:
    """Measured steps: ``n_decode, chunk, ctx, prefix, ms`` (at least 3 rows)."""
    from servecal.profiler.importers.csvfile import read_profile_csv

    frame = read_profile_csv(path, STEP_COLUMNS)
    counts = frame[list(STEP_COLUMNS[:4])]
    if (counts < 0).to_numpy().any() or ((frame["n_decode"] + frame["chunk"]) < 1).any():
        raise InputError(f"{path}: every step needs n_decode + chunk >= 1 and counts >= 0")
    if (frame["ms"] <= 0).any() or not np.isfinite(frame["ms"]).all():
        raise InputError(f"{path}: column 'ms': every step time must be a number > 0")
    if len(frame) < 3:
        raise InputError(f"{path}: {len(frame)} steps; fitting 3 parameters needs at least 3")
    return frame


def _nonnegative_lstsq(design: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0 (two unknowns: try the faces)."""
    best, best_cost = np.zeros(design.shape[1]), float(np.sum(target**2))
    for keep in ([0, 1], [0], [1]):
        coef = np.zeros(design.shape[1])
        sol, *_ = np.linalg.lstsq(design[:, keep], target, rcond=None)
        if (sol < 0).any():
            continue
        coef[keep] = sol
        cost = float(np.sum((design @ coef - target) ** 2))
        if cost < best_cost:
            best, best_cost = coef, cost
    return best


def fit_overhead(gpu_ms: Any, requests: Any, measured_ms: Any) -> HostOverhead:
    """Parameters minimising the squared relative error of ``step`` over the steps.

    For each candidate floor (0, and the measured and GPU times below the smallest
    measured step), ``c0, c1`` are non-negative least squares on the remainder,
    weighted by 1/measured so short and long steps count alike."""
    gpu = np.asarray(gpu_ms, dtype=float)
    n = np.asarray(requests, dtype=float)
    y = np.asarray(measured_ms, dtype=float)
    if not (len(gpu) == len(n) == len(y)) or len(y) < 3:
        raise InputError("engine overhead fit: needs at least 3 steps")
    weight = 1.0 / y
    design = np.column_stack([np.ones_like(n), n]) * weight[:, None]
    top = float(y.max())
    floors = np.unique(np.concatenate([[0.0], np.linspace(0.0, top, 401), gpu[gpu <= top], y]))
    best: tuple[float, HostOverhead] | None = None
    for floor in floors:
        rest = (y - np.maximum(gpu, floor)) * weight
        c0, c1 = _nonnegative_lstsq(design, rest)
        model = HostOverhead(float(floor), float(c0), float(c1))
        cost = float(np.sum((model.step_ms(gpu, n) / y - 1.0) ** 2))
        if best is None or cost < best[0] - 1e-12:
            best = (cost, model)
    assert best is not None
    return best[1]


def relative_errors(predicted: Any, measured: Any) -> np.ndarray:
    """``|predicted - measured| / measured`` per step."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    return np.abs(p - m) / m
