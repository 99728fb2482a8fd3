"""What a fresh process pays before its first answer: commands that load a cost table,
timed as ratios to ``python -c "import numpy"`` measured in the same run.

Run: ``python benchmarks/startup.py [--repeats 7] [--baseline REV]``.

Each command runs ``--repeats`` times in fresh processes, the commands interleaved
(round robin, so a busy host's slow seconds fall on all of them alike); the figure is
each command's median wall and CPU seconds and its ratio to ``import numpy``'s. The
commands: ``import numpy``; a Python process that loads a shipped cost table and
answers one ``predict`` (and one ``max_chunk``); ``servecal --help``; ``servecal
export`` (CSV) and ``servecal validate`` of a shipped table. Then *first after an
install*: the same table process with empty caches (``PYTHONPYCACHEPREFIX`` and
``NUMBA_CACHE_DIR`` set to an empty folder: every module compiled from source, and
any numba routine, as the first run after ``pip install`` does), once per repeat.
``--baseline REV`` runs the table process and its first-after-install twin on
revision ``REV``'s code too (``PYTHONPATH``), in the same rounds.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import _cached_bytecode_env, _tree_at  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "sched" / "data" / "device_a100_fitted.json"
IMPORTED = ROOT / "sched" / "data" / "imported_a100x1"
PREDICT = (
    "from servecal.costmodels import CostTable\n"
    f"t = CostTable.load({str(TABLE)!r})\n"
    "print(t.predict(8, 256, 1000), t.max_chunk(8, 1000, 0, 20.0, 512))\n"
)


def timed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one fresh process (any exit code: validate's says a verdict)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(command, capture_output=True, env=env, cwd=cwd)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def commands(work: Path) -> dict[str, list[str]]:
    """The timed commands by label (run in ``work``, outside the repository)."""
    py, cli = sys.executable, [sys.executable, "-m", "servecal"]
    return {
        "import numpy": [py, "-c", "import numpy"],
        "load table + predict": [py, "-c", PREDICT],
        "servecal --help": [*cli, "--help"],
        "servecal export (csv)": [
            *cli,
            "export",
            str(TABLE),
            "--format",
            "csv",
            "--out",
            str(work / "long.csv"),
        ],  # fmt: skip
        "servecal validate": [
            *cli,
            "validate",
            str(IMPORTED / "table.json"),
            str(IMPORTED / "samples.csv"),
            "--json",
        ],  # fmt: skip
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--baseline", metavar="REV", help="also time REV's table process")
    args = parser.parse_args()
    env = _cached_bytecode_env()
    with tempfile.TemporaryDirectory(prefix="servecal-startup-") as tmp:
        work = Path(tmp)
        runs = {label: (cmd, env) for label, cmd in commands(work).items()}
        if args.baseline:
            (work / "rev").mkdir()
            old = {**env, "PYTHONPATH": str(_tree_at(args.baseline, work / "rev"))}
            runs[f"load table + predict @ {args.baseline}"] = (runs["load table + predict"][0], old)
        for cmd, e in list(runs.values()):  # one untimed run each: the .pyc files
            timed(cmd, e, work)
        firsts = {"load table + predict": env}
        if args.baseline:
            firsts[f"load table + predict @ {args.baseline}"] = old
        times: dict[str, list[tuple[float, float]]] = {}
        for r in range(args.repeats):
            for label, (cmd, e) in runs.items():
                times.setdefault(label, []).append(timed(cmd, e, work))
            for label, e in firsts.items():  # an empty bytecode cache: a fresh install
                empty = str(work / f"pyc-{r}-{len(label)}")  # bytecode and numba's cache
                fresh = {**e, "PYTHONPYCACHEPREFIX": empty, "NUMBA_CACHE_DIR": empty}
                times.setdefault(f"{label}, first after install", []).append(
                    timed(runs[label][0], fresh, work)
                )
    numpy_wall = statistics.median(w for w, _ in times["import numpy"])
    numpy_cpu = statistics.median(c for _, c in times["import numpy"])
    print(f"fresh processes, median of {args.repeats} interleaved rounds; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (shared host)")  # fmt: skip
    print(f"{'command':<52} {'wall s':>7} {'CPU s':>7} {'wall/numpy':>11} {'CPU/numpy':>10}")
    for label, samples in times.items():
        wall = statistics.median(w for w, _ in samples)
        cpu = statistics.median(c for _, c in samples)
        print(f"{label:<52} {wall:7.2f} {cpu:7.2f} {wall / numpy_wall:10.1f}x "
              f"{cpu / numpy_cpu:9.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
