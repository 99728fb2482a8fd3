"""Time of one SLOWeave decision under a margin controller (``controlled_chunk``),
against the same function from another revision, interleaved in one run.

    nice -n 19 python benchmarks/controlled_chunk.py --baseline OLD_SLOWEAVE.py --rounds 25

``--baseline``: a copy of an older ``sched/policies/sloweave.py`` (``git show
REV:sched/policies/sloweave.py > old.py``), imported beside this tree's (it decides
with this tree's controllers). Each round times both, one after the other (2,000 calls,
best of 3); the table gives each side's best round and their ratio: the host's CPUs
change speed, so only a ratio within one run means anything. The decision: 8 decodes
at 1,024 context, a 4,096-token limit, 10 ms to the deadline, the ``fitted`` table of
the ``device`` truth.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import timeit
from pathlib import Path
from types import ModuleType

from servecal.sched.experiment.models import load_predictor
from servecal.sched.policies import sloweave


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("baseline_sloweave", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"error: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _per_call_us(module: ModuleType, config: sloweave.SLOWeaveConfig, table: object) -> float:
    control = config.controller()
    decide = module.controlled_chunk

    def step() -> None:
        decide(control, table, config, 8, 1024.0, 0, 4096, 0.0, 10.0, 0.0)

    return min(timeit.repeat(step, number=2000, repeat=3)) / 2000 * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    baseline = _module(args.baseline)
    table = load_predictor("fitted", "device")
    print("| margin_control | baseline µs | this tree µs | this / baseline |")
    print("| --- | --- | --- | --- |")
    for control in ("slo", "region", "fixed"):
        config = sloweave.SLOWeaveConfig(margin_control=control)
        old, new = [], []
        for _ in range(args.rounds):
            old.append(_per_call_us(baseline, config, table))
            new.append(_per_call_us(sloweave, config, table))
        print(f"| {control} | {min(old):.2f} | {min(new):.2f} | {min(new) / min(old):.3f} |")


if __name__ == "__main__":
    main()
