"""What a torch run needs before its first iteration: device, model, clock, meter, table.

Everything is chosen to match the calibration that produced the cost table: the
shape, dtype and number of layers built (scaled like calibration when fewer than
the model's) come from the table's fingerprint unless the user overrides them,
the CPU thread count too. The device's own fingerprint is then compared with the
table's and a mismatch is reported as a warning (the table may not fit this run).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from servecal.costmodels import CostTable
from servecal.costmodels.provenance import NO_TRUST, TableTrust
from servecal.profiler.calibrate import (
    DEFAULT_LAYERS_TIMED,
    DTYPES,
    default_threads,
    resolve_device,
)
from servecal.profiler.energy import EnergyMeter, open_meter
from servecal.profiler.fingerprint import attention_backend, fingerprint
from servecal.profiler.model import Transformer, build_model, default_dtype
from servecal.profiler.shapes import ModelShape
from servecal.profiler.timing import CpuClock, CudaClock, LayerScale, make_clock
from servecal.util.errors import InputError


@dataclass
class TorchSetup:
    """A built model on its device with the clock, meter and table of a torch run."""

    device: torch.device
    model: Transformer
    scale: LayerScale
    clock: CpuClock | CudaClock
    meter: EnergyMeter | None
    table: CostTable
    table_path: Path
    fingerprint: dict[str, Any]
    threads: int | None
    notices: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        return {
            "device": str(self.device),
            "model": self.model.shape.name,
            "model_hash": self.model.shape.hash,
            "dtype": str(self.model.dtype).removeprefix("torch."),
            "layers_built": self.scale.timed,
            "layers_total": self.scale.total,
            "torch_threads": self.threads,
            "energy_source": self.meter.source if self.meter is not None else None,
            "table": str(self.table_path),
            "notices": list(self.notices),
        }


def load_setup(
    table_path: str | Path,
    device: str = "auto",
    model: str | None = None,
    threads: int | None = None,
    seed: int = 0,
    trust: TableTrust = NO_TRUST,
) -> TorchSetup:
    """Build the model the table was calibrated on (or ``model``) on ``device``
    (``trust``: the command's table flags)."""
    path = Path(table_path)
    if not path.is_file():
        raise InputError(f"--predictor {path}: the torch executor needs a cost table JSON file")
    table = CostTable.load(path, trust=trust)
    table_fp = table.fingerprint
    dev = resolve_device(device)
    shape = _shape_for(model, table_fp, dev)
    dtype_name = table_fp.get("dtype")
    dtype = DTYPES.get(dtype_name) if isinstance(dtype_name, str) else None
    dtype = dtype or default_dtype(dev)
    layers = int(table_fp.get("layers_timed") or DEFAULT_LAYERS_TIMED)
    layers = max(1, min(layers, shape.n_layers))
    used_threads = None
    if dev.type == "cpu":
        used_threads = threads or table_fp.get("torch_threads") or default_threads()
        torch.set_num_threads(int(used_threads))
    built = build_model(shape, dev, dtype, layers, seed)
    scale = LayerScale(layers, shape.n_layers)
    meter, notice = open_meter(dev)
    fp = fingerprint(built, scale, used_threads, attention_backend(built))
    notices = [notice] if notice else []
    notices += _mismatch_notices(path, table_fp, fp, used_threads, trust)
    return TorchSetup(
        device=dev,
        model=built,
        scale=scale,
        clock=make_clock(dev),
        meter=meter,
        table=table,
        table_path=path,
        fingerprint=fp,
        threads=used_threads,
        notices=notices,
    )


def _shape_for(model: str | None, table_fp: dict[str, Any], dev: torch.device) -> ModelShape:
    """``model`` if given, else the shape the table was calibrated on, else the default
    shape for the device kind."""
    if model is not None:
        return ModelShape.resolve(model)
    if "model_shape" in table_fp:
        return ModelShape(**table_fp["model_shape"])
    return ModelShape.resolve("tiny" if dev.type == "cpu" else "llama-3-8b")


def _mismatch_notices(
    path: Path,
    table_fp: dict[str, Any],
    fp: dict[str, Any],
    used_threads: int | None,
    trust: TableTrust = NO_TRUST,
) -> list[str]:
    """A ``warning:`` line for each way this run differs from the table's calibration:
    the fingerprint, the KV layout, the torch threads."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # warns on a mismatch under --allow-mismatch, else refuses
        CostTable.load(path, fingerprint=fp, trust=trust)
    notices = [f"warning: {w.message}" for w in caught]
    # a servecal fingerprint (it has layers_timed) with no kv_layout timed the contiguous one
    layout = table_fp.get("kv_layout", "contiguous" if "layers_timed" in table_fp else None)
    if layout not in (None, "paged"):
        notices.append(
            f"warning: {path} was calibrated with the {layout} KV layout; the torch executor "
            "pages its KV (servecal calibrate --kv-layout paged times its own pass)"
        )
    if table_fp.get("torch_threads") not in (None, used_threads):
        notices.append(
            f"warning: {path} was calibrated with {table_fp['torch_threads']} torch threads, "
            f"this run uses {used_threads}"
        )
    return notices
