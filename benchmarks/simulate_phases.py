"""Where one ``servecal simulate`` process's CPU goes, phase by phase.

Run: ``python benchmarks/simulate_phases.py SIMULATE-ARGS...`` (the arguments after
``servecal``, e.g. ``simulate --workload ... --out run --json``), with ``.pyc`` files
written (unset ``PYTHONDONTWRITEBYTECODE`` and run once first: an installed package
has them).

Runs the command in this process with the process's CPU clock read at the start and
end of each phase: importing the command line, parsing the flags and building the spec
(up to the checks), loading the truth and the predictor, the requests, the engine's
loop, the result's columns, the metrics, the run folder. Prints CPU seconds per phase
to stderr.
"""

from __future__ import annotations

import sys
import time
from typing import Any

CLOCK = time.process_time
marks: list[tuple[str, float]] = [("interpreter", CLOCK())]
from servecal.cli import main  # noqa: E402

marks.append(("import the command line", CLOCK()))


#: What runs between the previous phase and the one named (unmarked work).
BEFORE = {
    "load the truth": "flags, spec, policy",
    "the result's columns": "the engine's loop",
}


def _timed(owner: Any, name: str, label: str) -> None:
    """Mark the CPU clock before and after ``owner.name`` (``label``) runs."""
    inner = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        marks.append((BEFORE.get(label, f"other, before {label}"), CLOCK()))
        try:
            return inner(*args, **kwargs)
        finally:
            marks.append((label, CLOCK()))

    setattr(owner, name, wrapper)


def _instrument() -> None:
    from servecal.sched.engine import Engine

    check = sys.modules["servecal.sched.experiment.check"]
    run = sys.modules["servecal.sched.experiment.run"]
    sweep = sys.modules["servecal.sched.experiment.sweep"]
    runfolder = sys.modules["servecal.sched.runfolder"]
    _timed(check, "load_truth", "load the truth")
    _timed(check, "load_predictor", "load the predictor")
    _timed(run, "requests_for", "the requests")
    _timed(Engine, "result", "the result's columns")
    _timed(sweep, "summarize", "the metrics")
    _timed(runfolder, "write_run", "the run folder")


def main_timed(argv: list[str]) -> None:
    import servecal.sched.experiment.check  # noqa: F401  (loaded by the command anyway)
    import servecal.sched.runfolder  # noqa: F401

    _instrument()
    sys.argv = ["servecal", *argv]
    try:
        main()
    except SystemExit as exc:
        if exc.code:
            raise
    marks.append(("exit", CLOCK()))
    previous = 0.0
    for label, at in marks:
        if at - previous >= 0.0005:  # a phase that did not run (cached) prints nothing
            print(f"{label:<36} {at - previous:7.3f} CPU s", file=sys.stderr)
        previous = at
    print(f"{'total':<36} {marks[-1][1]:7.3f} CPU s", file=sys.stderr)


if __name__ == "__main__":
    main_timed(sys.argv[1:])
