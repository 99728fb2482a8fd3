"""Host overhead of an eager engine: the time a step spends outside the GPU kernels.

A composed table prices the kernels. An engine that launches them from Python, one
by one (Sarathi-Serve, Splitwise's vLLM, any non-graph run) adds time the kernels do
not show: a floor below which a step cannot go however little the GPU works (launch
and synchronisation cost, flat across TP), a fixed per-step cost (scheduling, input
preparation, sampling) and a cost per request in the batch (its metadata, its sampled
token). The model:

    step = max(s · GPU_other + a · GPU_attention, floor) + c0 + c1 · n
                                 (n = requests in the batch: decodes + 1 if a prefill chunk)

``s`` (``gpu_scale``) and ``a`` (``attention_scale``), both 1 by default, say how much
slower the engine's kernels are than the profile's: 1 when the engine ran the profiled
kernels on the profiled device; above 1 on a slower device or with older kernels
(Sarathi-Serve's A100 PCIe, 300 W, and its 2024 attention kernels, against an A100-SXM
vLLM 0.14 profile: its table 2 has linear layers 1.06-1.17x and attention 1.8-2.7x the
composed ones). With both at 1 the model is ``max(GPU, floor) + c0 + c1 · n``.

The parameters come from a small JSON file (``floor_ms``, ``c0_ms``, ``c1_ms``,
``gpu_scale``, ``attention_scale``) or are fitted (:func:`fit_overhead`) from measured
steps (a CSV with ``n_decode, chunk, ctx, prefix, ms``) against the composed GPU time
of the same steps.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from servecal.util.errors import InputError

#: Columns of a measured-steps CSV (``ms``: the step as the engine measured it).
STEP_COLUMNS = ("n_decode", "chunk", "ctx", "prefix", "ms")
PARAMETERS = ("floor_ms", "c0_ms", "c1_ms", "gpu_scale", "attention_scale")
SCALES_AT_ONE = ("gpu_scale", "attention_scale")
#: Values the fit tries for ``gpu_scale`` (device speed) and ``attention_scale`` (kernel).
GPU_SCALES = tuple(round(0.8 + 0.01 * i, 2) for i in range(81))
ATTENTION_SCALES = tuple(round(1.0 + 0.1 * i, 1) for i in range(21))


@dataclass(frozen=True)
class HostOverhead:
    """``step = max(gpu_scale · other + attention_scale · attention, floor_ms) + c0_ms
    + c1_ms · n`` (ms, all >= 0; ``other`` = GPU time outside attention)."""

    floor_ms: float = 0.0
    c0_ms: float = 0.0
    c1_ms: float = 0.0
    gpu_scale: float = 1.0
    attention_scale: float = 1.0

    def __post_init__(self) -> None:
        for name in PARAMETERS:
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0:
                raise InputError(f"engine overhead: {name} must be a finite number >= 0")
        for name in SCALES_AT_ONE:
            if getattr(self, name) == 0:
                raise InputError(f"engine overhead: {name} must be > 0")

    def kernels_ms(self, gpu_ms: Any, attention_ms: Any = 0.0) -> np.ndarray:
        """The engine's kernel time: the composed GPU time with both scales applied."""
        gpu = np.asarray(gpu_ms, dtype=float)
        attention = np.broadcast_to(np.asarray(attention_ms, dtype=float), gpu.shape)
        return self.gpu_scale * (gpu - attention) + self.attention_scale * attention

    def step_ms(self, gpu_ms: Any, requests: Any, attention_ms: Any = 0.0) -> np.ndarray:
        """Predicted steps for composed GPU times ``gpu_ms`` (of which ``attention_ms``
        is attention) and batch sizes ``requests``."""
        n = np.asarray(requests, dtype=float)
        kernels = self.kernels_ms(gpu_ms, attention_ms)
        return np.maximum(kernels, self.floor_ms) + self.c0_ms + self.c1_ms * n

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
    """A JSON object of :data:`PARAMETERS` (missing: 0, the two scales 1)."""
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
        value = data.get(key, 1.0 if key in SCALES_AT_ONE else 0.0)
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
        raise InputError(f"{path}: {len(frame)} steps; fitting needs at least 3")
    return frame


def _best_nonnegative(design: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``targets`` (candidates × steps): coefficients >= 0 of ``design``
    (steps × 2) minimising the squared residual, and that residual. Two unknowns, so the
    constrained optimum is the free one or lies on a face (one or both at 0)."""
    rows = targets.shape[0]
    options = [(np.zeros((rows, 2)), np.sum(targets**2, axis=1))]
    free = targets @ np.linalg.pinv(design).T
    for coef in (free, *_faces(design, targets)):
        valid = (coef >= 0).all(axis=1)
        cost = np.sum((coef @ design.T - targets) ** 2, axis=1)
        options.append((coef, np.where(valid, cost, np.inf)))
    costs = np.stack([c for _, c in options])
    pick = np.argmin(costs, axis=0)
    coefs = np.stack([c for c, _ in options])[pick, np.arange(rows)]
    return coefs, costs[pick, np.arange(rows)]


def _faces(design: np.ndarray, targets: np.ndarray) -> list[np.ndarray]:
    faces = []
    for j in range(design.shape[1]):
        col = design[:, j]
        coef = np.zeros((targets.shape[0], design.shape[1]))
        coef[:, j] = targets @ col / float(col @ col)
        faces.append(coef)
    return faces


def fit_overhead(
    gpu_ms: Any,
    requests: Any,
    measured_ms: Any,
    attention_ms: Any = None,
    fit_scale: bool = True,
) -> HostOverhead:
    """Parameters minimising the squared relative error of ``step`` over the steps.

    For each ``gpu_scale`` in :data:`GPU_SCALES` and ``attention_scale`` in
    :data:`ATTENTION_SCALES` (both only 1 with ``fit_scale=False``; the attention scale
    only 1 without ``attention_ms``) and each candidate floor (0, 400 levels up to the
    longest step, and the scaled GPU times), ``c0, c1`` are non-negative least squares
    on the remainder, weighted by 1/measured so short and long steps count alike; the
    best of all is returned."""
    gpu = np.asarray(gpu_ms, dtype=float)
    n = np.asarray(requests, dtype=float)
    y = np.asarray(measured_ms, dtype=float)
    if not (len(gpu) == len(n) == len(y)) or len(y) < 3:
        raise InputError("engine overhead fit: needs at least 3 steps")
    attention = np.zeros_like(gpu) if attention_ms is None else np.asarray(attention_ms, float)
    weight = 1.0 / y
    design = np.column_stack([np.ones_like(n), n]) * weight[:, None]
    top = float(y.max())
    scales = GPU_SCALES if fit_scale else (1.0,)
    attention_scales = ATTENTION_SCALES if fit_scale and attention_ms is not None else (1.0,)
    best: tuple[float, HostOverhead] | None = None
    for a in attention_scales:
        for s in scales:
            kernels = HostOverhead(gpu_scale=s, attention_scale=a).kernels_ms(gpu, attention)
            below = kernels[kernels <= top]
            floors = np.unique(np.concatenate([np.linspace(0.0, top, 401), below]))
            targets = (y[None, :] - np.maximum(kernels[None, :], floors[:, None])) * weight
            coefs, costs = _best_nonnegative(design, targets)
            i = int(np.argmin(costs))
            if best is None or costs[i] < best[0] - 1e-12:
                c0, c1 = coefs[i]
                model = HostOverhead(float(floors[i]), float(c0), float(c1), s, a)
                best = (float(costs[i]), model)
    assert best is not None
    return best[1]


def relative_errors(predicted: Any, measured: Any) -> np.ndarray:
    """``|predicted - measured| / measured`` per step."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    return np.abs(p - m) / m
