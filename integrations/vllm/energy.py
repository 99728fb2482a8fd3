"""Energy meters for the vLLM plug-in's run log: the device's cumulative counter, read
every few steps, apportioned to the steps in between.

Plain Python: nothing here imports vLLM or torch, so the run log can open a meter in
vLLM's scheduler process (which holds no CUDA context) and tests run it on any CPU.

* :class:`EnergyMeter`: ``read_j()`` (cumulative joules since the meter opened) and
  ``source`` (``nvml``, ``rapl``, ``fake``): the protocol ``calibrate`` meters with too.
* :func:`open_energy_meter`: NVML's total-energy counter of the GPUs the engine uses
  (the same :class:`~servecal.profiler.energy.NvmlMeter` ``calibrate`` reads), else the
  host's RAPL package zones, else ``None`` with one line saying why. Energy is then
  *unavailable*, never zero.
* :class:`StepEnergy`: per-step joules from a meter read every ``every`` steps.
* :class:`FakeMeter`: a meter for tests (constant power on a clock you give it);
  :class:`ConstantPowerMeter`: the same at 100 W of wall time, loadable by name
  (``energy_meter: "servecal.integrations.vllm.energy:ConstantPowerMeter"``) for a dry
  run of the energy path on a machine without a meter; its source says ``fake``.
* :func:`load_meter`: a meter of one's own from ``MODULE:NAME``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from servecal.plugins import Registry
from servecal.profiler.energy import RAPL_ROOT, NvmlId, open_nvml, open_rapl

#: What ``energy_source`` says when no meter could be opened.
UNAVAILABLE = "unavailable"


@runtime_checkable
class EnergyMeter(Protocol):
    """A cumulative energy counter."""

    source: str

    def read_j(self) -> float:
        """Joules consumed since the meter opened (non-decreasing)."""
        ...


class FakeMeter:
    """``power_w`` × the time ``clock`` has advanced since the meter opened (tests)."""

    def __init__(
        self, power_w: float, clock: Callable[[], float] = time.perf_counter, source: str = "fake"
    ) -> None:
        if not (math.isfinite(power_w) and power_w >= 0):
            raise ValueError(f"FakeMeter.power_w must be finite and >= 0, got {power_w!r}")
        self.power_w = power_w
        self._clock = clock
        self._t0 = clock()
        self.source = source
        self.reads = 0

    def read_j(self) -> float:
        self.reads += 1
        return self.power_w * (self._clock() - self._t0)


#: :class:`ConstantPowerMeter`'s power (W): a round figure, near a small GPU's idle.
CONSTANT_POWER_W = 100.0


class ConstantPowerMeter(FakeMeter):
    """:data:`CONSTANT_POWER_W` × the wall time since it opened: not a measurement, a
    stand-in that gives a run folder energy rows (source ``fake:constant-100W``, which
    reports name as a test's meter) where no NVML or RAPL counter exists."""

    def __init__(self) -> None:
        super().__init__(
            CONSTANT_POWER_W, time.perf_counter, f"fake:constant-{CONSTANT_POWER_W:g}W"
        )


def load_meter(path: str) -> EnergyMeter:
    """The meter ``MODULE:NAME`` builds when called with no arguments (a class or a
    factory), loaded as user policies are; an :class:`InputError` of one line naming
    ``path`` when it does not import, fails, or is not an :class:`EnergyMeter`."""
    from servecal.sched.policies.registry import load_object
    from servecal.util.errors import InputError

    factory = load_object(path, "energy_meter")
    try:
        meter = factory()
        if not isinstance(meter, EnergyMeter) or not isinstance(meter.source, str):
            raise TypeError(f"{meter!r} is not a meter (needs read_j() and a source string)")
        first = meter.read_j()
    except Exception as exc:  # noqa: BLE001 - the user's meter, any failure
        raise InputError(f"energy_meter {path!r}: {type(exc).__name__}: {exc}") from None
    if not (isinstance(first, int | float) and math.isfinite(first)):
        raise InputError(f"energy_meter {path!r}: read_j() gave {first!r}, not a number of J")
    return meter


def _physical_gpus(gpus: Sequence[int | str] | None) -> list[NvmlId]:
    """NVML indices (or ``GPU-…`` UUIDs) of the engine's logical CUDA devices.

    NVML numbers every GPU on the host; CUDA numbers only ``CUDA_VISIBLE_DEVICES``,
    in its order, so logical device ``k`` is the ``k``-th entry there.
    """
    logical = list(gpus) if gpus is not None else [0]
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    visible = [v for v in visible if v]
    out: list[NvmlId] = []
    for g in logical:
        if isinstance(g, str):  # a UUID names a physical GPU already
            out.append(g)
        elif visible and g < len(visible):
            v = visible[g]
            out.append(int(v) if v.isdigit() else v)
        else:
            out.append(g)
    return out


def open_auto(
    gpus: Sequence[int | str] | None, rapl_root: str = RAPL_ROOT
) -> tuple[EnergyMeter | None, str | None]:
    """``auto``: the engine's GPUs' NVML counters, else the host's RAPL."""
    notices = []
    for opener in (open_engine_nvml, open_host_rapl):
        meter, notice = opener(gpus, rapl_root)
        if meter is not None:
            return meter, None
        notices.append(notice)
    reasons = "; ".join(n.removeprefix("energy unavailable: ") for n in notices if n)
    return None, f"energy unavailable: {reasons}"


def open_engine_nvml(
    gpus: Sequence[int | str] | None, rapl_root: str = RAPL_ROOT
) -> tuple[EnergyMeter | None, str | None]:
    """``nvml``: the NVML counters of the engine's GPUs, summed (``rapl_root`` unused)."""
    return open_nvml(lambda: _physical_gpus(gpus))


def open_host_rapl(
    gpus: Sequence[int | str] | None, rapl_root: str = RAPL_ROOT
) -> tuple[EnergyMeter | None, str | None]:
    """``rapl``: the host's RAPL package counters (``gpus`` unused: the whole socket)."""
    return open_rapl(rapl_root)


def open_no_meter(
    gpus: Sequence[int | str] | None, rapl_root: str = RAPL_ROOT
) -> tuple[EnergyMeter | None, str | None]:
    """``none``: no meter, and nothing to say about it."""
    return None, None


#: ``energy_meter`` of the vLLM plug-in: where its run log's joules come from, each
#: opened by ``open(gpus, rapl_root) -> (meter | None, notice)``; a user's own meter is
#: ``MODULE:NAME``, called with no arguments (:func:`load_meter`).
ENERGY_METERS = Registry(
    "energy meter",
    "energy_meter",
    "factory() -> EnergyMeter (read_j() in J, source)",
    user_form="MODULE:NAME",
)
# fmt: off
ENERGY_METERS.add("auto", "servecal.integrations.vllm.energy:open_auto", "the engine's GPUs' NVML counters, else the host's RAPL package counters")  # noqa: E501
ENERGY_METERS.add("nvml", "servecal.integrations.vllm.energy:open_engine_nvml", "NVML's total-energy counters of the engine's GPUs (summed under TP)")  # noqa: E501
ENERGY_METERS.add("rapl", "servecal.integrations.vllm.energy:open_host_rapl", "the host's RAPL package counters (the whole socket, every process on it)")  # noqa: E501
ENERGY_METERS.add("none", "servecal.integrations.vllm.energy:open_no_meter", "no energy (run.json says unavailable)")  # noqa: E501
# fmt: on


def open_energy_meter(
    prefer: str = "auto",
    gpus: Sequence[int | str] | None = None,
    rapl_root: str = RAPL_ROOT,
) -> tuple[EnergyMeter | None, str | None]:
    """``(meter, None)``, or ``(None, "energy unavailable: why")`` (``none``: ``(None, None)``).

    ``prefer``: a name of :data:`ENERGY_METERS` (``auto``: NVML if it opens, else
    RAPL; ``nvml`` or ``rapl`` only; ``none``). ``gpus``: the engine's logical CUDA
    device indices (default ``[0]``; a tensor-parallel engine passes all of them and
    the counters are summed) or NVML UUIDs. A RAPL package counter covers the whole
    socket, every process on it.
    """
    if prefer not in ENERGY_METERS:
        known = ", ".join(ENERGY_METERS.names())
        raise ValueError(f"energy meter must be one of {known}, got {prefer!r}")
    opener = ENERGY_METERS.load(ENERGY_METERS.entries[prefer].target)
    return opener(gpus, rapl_root)  # type: ignore[no-any-return]


class StepEnergy:
    """Joules per engine step from a cumulative meter read every ``every`` steps.

    Call :meth:`step` once per step with its duration, :meth:`close` at the end. Each
    read's joules (since the previous read: steps *and* the host time between them)
    are shared among the steps of its window in proportion to their durations, so the
    steps' energies sum to the meter's total from the first read to the last. A
    meter moves in coarse steps (NVML about every 10-100 ms), so ``every`` trades
    per-step detail the counter cannot give anyway for fewer reads; the run's total is
    exact either way. Steps after the last read are NaN until :meth:`close`.
    """

    def __init__(self, meter: EnergyMeter, every: int = 1) -> None:
        if every < 1:
            raise ValueError(f"StepEnergy.every must be >= 1, got {every!r}")
        self._meter = meter
        self.every = every
        self.source: str = meter.source
        self._last_j = meter.read_j()
        self._pending: list[float] = []
        self._energy: list[float] = []
        self.reads = 1

    def step(self, duration_s: float) -> None:
        """Record one step of ``duration_s`` seconds; read the meter every ``every``."""
        pending = self._pending
        pending.append(duration_s if duration_s > 0 else 0.0)
        if len(pending) >= self.every:
            self._read()

    def _read(self) -> None:
        now = self._meter.read_j()
        self.reads += 1
        joules = max(0.0, now - self._last_j)  # a counter never runs backwards
        self._last_j = now
        pending = self._pending
        if len(pending) == 1:  # read every step: nothing to share
            self._energy.append(joules)
        else:
            total = math.fsum(pending)
            if total > 0:
                scale = joules / total
                self._energy.extend([d * scale for d in pending])
            else:
                self._energy.extend([joules / len(pending)] * len(pending))
        pending.clear()

    def close(self) -> None:
        """Read the meter for the steps since the last read (idempotent)."""
        if self._pending:
            self._read()

    def drain(self) -> list[float]:
        """Read the meter for the steps since the last read and hand over (and forget)
        every step's joules so far: a long-running log keeps none of them."""
        self.close()
        out, self._energy = self._energy, []
        return out

    @property
    def energy_j(self) -> list[float]:
        """Joules per step so far; NaN for steps not yet covered by a read."""
        return self._energy + [math.nan] * len(self._pending)

    @property
    def total_j(self) -> float:
        """Joules of the steps covered by reads so far."""
        return math.fsum(self._energy)
