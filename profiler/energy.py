"""Energy meters: NVML's total-energy counter on NVIDIA GPUs, Linux RAPL on CPUs.

Both are cumulative counters that move in coarse steps (NVML about every 100 ms),
so the sweep reads one around a *group* of iterations long enough for it to move
and divides by the count. :func:`open_meter` returns a meter, or ``None`` and one
line saying why energy is unavailable; callers then write ``energy_j = null``,
never zero.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # torch is imported where a device is opened: the meters need no torch
    import torch

RAPL_ROOT = "/sys/class/powercap"


class EnergyMeter(Protocol):
    source: str

    def read_j(self) -> float:
        """Joules consumed since the meter opened (monotone)."""
        ...

    def device_state(self) -> dict[str, float | int | None]:
        """Power (W), SM clock (MHz), temperature (°C), throttle reasons, where known."""
        ...


def rapl_delta_uj(before: int, after: int, max_range_uj: int) -> int:
    """Energy between two RAPL readings in µJ; the counter wraps at ``max_energy_range_uj``."""
    if after >= before:
        return after - before
    return after + max_range_uj - before


@dataclass
class _RaplZone:
    path: str
    max_range_uj: int
    last_uj: int
    fd: int


class RaplMeter:
    """Sum of the top-level ``intel-rapl:N`` package zones (the whole socket, all processes).

    Each zone's counter file stays open and is re-read from offset 0 (sysfs renders
    the value afresh on every read there): one system call per zone and read, which
    is what lets the vLLM plug-in read it every few steps
    (``benchmarks/energy_meter.py``)."""

    source = "rapl"

    def __init__(self, zones: list[str]) -> None:
        self._zones: list[_RaplZone] = []
        try:
            for z in zones:
                with open(os.path.join(z, "max_energy_range_uj")) as f:
                    max_range = int(f.read())
                fd = os.open(os.path.join(z, "energy_uj"), os.O_RDONLY)
                self._zones.append(_RaplZone(z, max_range, self._raw(fd), fd))
        except BaseException:
            self.close()
            raise
        self._total_uj = 0

    @staticmethod
    def _raw(fd: int) -> int:
        return int(os.pread(fd, 32, 0))

    def read_j(self) -> float:
        for z in self._zones:
            now = self._raw(z.fd)
            self._total_uj += rapl_delta_uj(z.last_uj, now, z.max_range_uj)
            z.last_uj = now
        return self._total_uj / 1e6

    def close(self) -> None:
        """Close the counter files (the meter cannot be read afterwards)."""
        zones, self._zones = getattr(self, "_zones", []), []
        for z in zones:
            with contextlib.suppress(OSError):  # already closed: nothing left to release
                os.close(z.fd)

    def __del__(self) -> None:
        self.close()

    def device_state(self) -> dict[str, float | int | None]:
        return {}


class NvmlMeter:
    """NVML total-energy counter (mJ, Volta and newer) and device state of one GPU."""

    source = "nvml"

    def __init__(self, nvml: object, handle: object) -> None:
        self._nvml = nvml
        self._h = handle
        self._start_mj = nvml.nvmlDeviceGetTotalEnergyConsumption(handle)

    def read_j(self) -> float:
        now = self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._h)
        return (now - self._start_mj) / 1e3

    def device_state(self) -> dict[str, float | int | None]:
        n = self._nvml
        state: dict[str, float | int | None] = {}
        probes = {
            "power_w": lambda: n.nvmlDeviceGetPowerUsage(self._h) / 1e3,
            "sm_clock_mhz": lambda: n.nvmlDeviceGetClockInfo(self._h, n.NVML_CLOCK_SM),
            "temp_c": lambda: n.nvmlDeviceGetTemperature(self._h, n.NVML_TEMPERATURE_GPU),
            "throttle": lambda: _throttle_reasons(n)(self._h),
        }
        for key, probe in probes.items():
            try:
                state[key] = probe()
            except n.NVMLError:  # one unsupported query must not cost the others
                state[key] = None
        return state


def _throttle_reasons(nvml: object) -> object:
    # NVML calls these "clocks event reasons"; drivers that lack that name have the
    # "throttle reasons" one.
    return getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or (
        nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    )


#: How NVML is told which GPU: its NVML index, its UUID (``GPU-…``), or ``(UUID, index)``
#: for "the UUID if NVML knows it, else the index" (CUDA's and NVML's indices can differ).
NvmlId = int | str | tuple[str, int]


def _nvml_handle(nvml: Any, gpu: NvmlId) -> object:
    if isinstance(gpu, tuple):
        uuid, index = gpu
        try:
            return nvml.nvmlDeviceGetHandleByUUID(uuid)
        except nvml.NVMLError:
            return nvml.nvmlDeviceGetHandleByIndex(index)
    if isinstance(gpu, str):
        return nvml.nvmlDeviceGetHandleByUUID(gpu)
    return nvml.nvmlDeviceGetHandleByIndex(gpu)


def open_nvml(gpus: Callable[[], Sequence[NvmlId]]) -> tuple[EnergyMeter | None, str | None]:
    """NVML's total-energy meter of the GPUs ``gpus()`` names (summed when several: a
    tensor-parallel replica), or ``(None, "energy unavailable: why")``.

    The one place servecal opens NVML (``calibrate``, the torch executor and the vLLM
    plug-in's run log all come here). ``gpus`` is called after NVML initialises, so a
    host without the driver says so before anything asks CUDA about its devices.
    """
    try:
        import pynvml
    except ImportError:
        return None, "energy unavailable: nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
        meters: list[EnergyMeter] = [NvmlMeter(pynvml, _nvml_handle(pynvml, g)) for g in gpus()]
    except pynvml.NVMLError_LibraryNotFound:
        return None, "energy unavailable: NVML library not found (no NVIDIA driver)"
    except pynvml.NVMLError_NotSupported:
        return None, "energy unavailable: this GPU has no total-energy counter (pre-Volta?)"
    except pynvml.NVMLError as exc:
        return None, f"energy unavailable: NVML error: {exc}"
    return (meters[0] if len(meters) == 1 else SumMeter(meters)), None


def _cuda_ids(device: torch.device, devices: int) -> list[NvmlId]:
    """``device`` and the ``devices - 1`` CUDA devices after it, each by its UUID (else
    its index)."""
    import torch

    ids: list[NvmlId] = []
    for index in range((device.index or 0), (device.index or 0) + devices):
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        ids.append(index if uuid is None else (f"GPU-{uuid}", index))
    return ids


def rapl_zones(root: str = RAPL_ROOT) -> list[str]:
    """Top-level package zones (``intel-rapl:0``), not their sub-zones (``intel-rapl:0:0``)."""
    zones = glob.glob(os.path.join(root, "intel-rapl:*"))
    return sorted(z for z in zones if re.fullmatch(r"intel-rapl:\d+", os.path.basename(z)))


def open_rapl(root: str = RAPL_ROOT) -> tuple[EnergyMeter | None, str | None]:
    zones = rapl_zones(root)
    if not zones:
        return None, f"energy unavailable: no RAPL package zones under {root}"
    try:
        return RaplMeter(zones), None
    except OSError as exc:
        where = exc.filename or zones[0]
        return None, f"energy unavailable: cannot read RAPL counter {where} ({exc.strerror})"


class SumMeter:
    """Several GPUs' meters read as one: a tensor-parallel replica's energy.

    ``device_state`` is the first GPU's (rank 0's) with ``power_w`` summed over all.
    """

    def __init__(self, meters: list[EnergyMeter]) -> None:
        self._meters = meters
        self.source = f"{meters[0].source} (sum of {len(meters)} GPUs)"

    def read_j(self) -> float:
        return sum(m.read_j() for m in self._meters)

    def device_state(self) -> dict[str, float | int | None]:
        states = [m.device_state() for m in self._meters]
        state = dict(states[0])
        powers = [s.get("power_w") for s in states]
        state["power_w"] = None if None in powers else sum(powers)  # type: ignore[arg-type]
        return state


def open_meter(
    device: torch.device, rapl_root: str = RAPL_ROOT, devices: int = 1
) -> tuple[EnergyMeter | None, str | None]:
    """The meter for ``device``, or ``(None, reason)`` when energy cannot be measured.

    ``devices > 1`` (tensor parallelism) on CUDA sums ``device`` and the GPUs after
    it; a CPU's RAPL package counter already covers every rank's process.
    """
    if device.type == "cuda":
        return open_nvml(lambda: _cuda_ids(device, devices))
    return open_rapl(rapl_root)
