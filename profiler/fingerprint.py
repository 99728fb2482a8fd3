"""What was measured, on what: the provenance that travels with the samples.

docs/design.md "Samples": device name and UUID, driver, CUDA and torch versions, model
shape and its hash, dtype, attention backend, layers timed and the scale applied,
servecal version, date. Also the tensor-parallel degree ``tp`` and the collective
backend the ranks' all-reduces ran on (``nccl``, ``gloo``; None at TP 1), and the
torch thread count on CPU (it changes timings).
"""

from __future__ import annotations

import datetime as dt
import platform
from typing import Any

import torch
import torch.nn.functional as F

from servecal import __version__
from servecal.profiler.model import Transformer, prefill_mask, sdpa
from servecal.profiler.timing import LayerScale


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_identity(device: torch.device) -> dict[str, Any]:
    """Name, UUID and driver of ``device`` (NVML where it answers, torch otherwise)."""
    if device.type != "cuda":
        return {"device": "cpu", "device_name": cpu_name(), "device_uuid": None, "driver": None}
    props = torch.cuda.get_device_properties(device.index or 0)
    uuid = getattr(props, "uuid", None)
    ident: dict[str, Any] = {
        "device": str(device),
        "device_name": props.name,
        "device_uuid": f"GPU-{uuid}" if uuid is not None else None,
        "driver": None,
        "compute_capability": f"{props.major}.{props.minor}",
        "memory_gib": round(props.total_memory / 2**30, 1),
    }
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        ident["driver"] = driver.decode() if isinstance(driver, bytes) else driver
    except Exception:  # noqa: BLE001 - any NVML failure just leaves the driver unknown
        pass
    return ident


def attention_backend(model: Transformer) -> dict[str, str]:
    """SDPA kernel used for the decode and the prefill-with-prefix call patterns.

    Probes the backends in torch's preference order under ``sdpa_kernel`` and
    reports the first that accepts each call (what torch itself would pick).
    """
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # pragma: no cover - torch < 2.3
        return {"decode": "sdpa", "prefill": "sdpa"}
    s, dev, dtype = model.local, model.device, model.dtype  # this rank's heads
    order = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    # build_model takes cuDNN out on CUDA (model.keep_attention_off_cudnn): not offered
    if hasattr(SDPBackend, "CUDNN_ATTENTION") and torch.backends.cuda.cudnn_sdp_enabled():
        order.append(SDPBackend.CUDNN_ATTENTION)
    order.append(SDPBackend.MATH)

    def first(call: Any) -> str:
        for backend in order:
            try:
                with sdpa_kernel([backend]), torch.inference_mode():
                    call()
                return backend.name.lower()
            except RuntimeError:
                continue
        return "unknown"

    q1 = torch.zeros(2, s.n_heads, 1, s.head_dim, device=dev, dtype=dtype)
    kv1 = torch.zeros(2, s.n_kv_heads, 16, s.head_dim, device=dev, dtype=dtype)
    qc = torch.zeros(1, s.n_heads, 8, s.head_dim, device=dev, dtype=dtype)
    kvc = torch.zeros(1, s.n_kv_heads, 24, s.head_dim, device=dev, dtype=dtype)
    mask = prefill_mask(16, 8, dev)
    return {
        "decode": first(lambda: sdpa(q1, kv1, kv1)),
        "prefill": first(lambda: sdpa(qc, kvc, kvc, mask=mask)),
        "api": F.scaled_dot_product_attention.__name__,
    }


def parallelism(model: Transformer) -> dict[str, Any]:
    """``tp`` and the collective backend (NCCL with its version, gloo, or None at TP 1)."""
    backend = model.collective.backend
    info: dict[str, Any] = {"tp": model.tp, "collective_backend": backend}
    if backend == "nccl":
        version = torch.cuda.nccl.version()
        info["nccl_version"] = (
            ".".join(map(str, version)) if isinstance(version, tuple) else version
        )
    return info


def fingerprint(
    model: Transformer,
    scale: LayerScale,
    threads: int | None,
    backend: dict[str, str],
) -> dict[str, Any]:
    """The provenance dict for a calibration of ``model`` on its device."""
    device = model.device
    return {
        **device_identity(device),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "model": model.shape.name,
        "model_shape": model.shape.to_dict(),
        "model_hash": model.shape.hash,
        **({"moe": model.shape.moe_label} if model.shape.is_moe else {}),
        "dtype": str(model.dtype).removeprefix("torch."),
        "kv_dtype": str(model.dtype).removeprefix("torch."),  # its KV pool's: the model's
        "attention_backend": backend,
        **parallelism(model),
        "layers_timed": scale.timed,
        "layers_total": scale.total,
        "layer_scale": scale.factor,
        "torch_threads": threads,
        "servecal_version": __version__,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "source": "servecal calibrate",
    }
