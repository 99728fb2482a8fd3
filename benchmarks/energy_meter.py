"""What reading an energy meter costs the vLLM plug-in per step.

Times, in one process, ``read_j()`` of every meter that opens here and
:meth:`StepEnergy.step` reading every step and every ``--every`` steps, and prints
the median ns per call (of ``--rounds`` rounds of ``--calls`` calls) beside the
plug-in's budget of 50 µs of added time per ``schedule()`` (docs/vllm.md):

* ``fake``: :class:`FakeMeter` (a clock read and a multiply): the floor;
* ``rapl-file``: :class:`RaplMeter` over a RAPL-shaped folder on this machine's
  filesystem (two file reads per package zone): a real ``open/read/close`` per zone,
  not the kernel's MSR read behind ``/sys/class/powercap`` (slower; measured as
  ``rapl`` where that exists);
* ``rapl``: the host's own package zones, where there are any;
* ``nvml``: ``nvmlDeviceGetTotalEnergyConsumption`` of GPU 0, where a driver is.

    python benchmarks/energy_meter.py [--calls 2000] [--rounds 7] [--every 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

from servecal.integrations.vllm.energy import FakeMeter, StepEnergy, open_energy_meter
from servecal.profiler.energy import RaplMeter

BUDGET_NS = 50_000


def per_call_ns(fn: Callable[[], object], calls: int, rounds: int) -> float:
    """Median over rounds of the mean ns per call."""
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter_ns() - t0) / calls)
    return statistics.median(out)


def rapl_folder(root: str, zones: int = 2) -> list[str]:
    paths = []
    for z in range(zones):
        path = os.path.join(root, f"intel-rapl:{z}")
        os.makedirs(path)
        with open(os.path.join(path, "energy_uj"), "w") as f:
            f.write("123456789\n")
        with open(os.path.join(path, "max_energy_range_uj"), "w") as f:
            f.write("262143328850\n")
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--every", type=int, default=8)
    args = parser.parse_args()
    meters: dict[str, object] = {"fake": FakeMeter(300.0)}
    with tempfile.TemporaryDirectory() as tmp:
        meters["rapl-file"] = RaplMeter(rapl_folder(tmp))
        for name in ("rapl", "nvml"):
            meter, notice = open_energy_meter(prefer=name)
            if meter is None:
                print(f"{name}: {notice}")
            else:
                meters[name] = meter
        every_n = f"step, every {args.every}"
        print(f"{'meter':10s} {'read_j ns':>10s} {'step, every 1':>14s} {every_n:>15s} "
              f"{'every-N share of 50 µs':>24s}")  # fmt: skip
        for name, meter in meters.items():
            read = per_call_ns(meter.read_j, args.calls, args.rounds)  # type: ignore[attr-defined]
            each = StepEnergy(meter, every=1)  # type: ignore[arg-type]
            some = StepEnergy(meter, every=args.every)  # type: ignore[arg-type]
            step1 = per_call_ns(lambda s=each: s.step(0.01), args.calls, args.rounds)
            stepn = per_call_ns(lambda s=some: s.step(0.01), args.calls, args.rounds)
            print(f"{name:10s} {read:10.0f} {step1:14.0f} {stepn:15.0f} "
                  f"{stepn / BUDGET_NS:23.2%}")  # fmt: skip


if __name__ == "__main__":
    main()
