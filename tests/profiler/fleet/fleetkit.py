"""Small factories for the fleet and job-backend tests: plans, grids, jobs with barriers."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

#: 9 cheap points of the tiny model (~2-5 ms each on one core); with 12 repeats,
#: 108 rows: enough for the fit's conformal margin (99 rows at 99%).
GRID = {"n_decode": [0, 2, 4], "chunk": [0, 16], "ctx": [16, 64], "prefix": [0]}
#: A reference iteration inside GRID (the fleet report prices it from each table).
REFERENCE = {"n_decode": 2, "chunk": 16, "ctx": 64, "prefix": 0}
TIMING = {"repeats": 12, "threads": 1, "budget": 120}


def toml_value(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def write_plan(
    folder: Path, jobs: list[dict[str, Any]], defaults: dict[str, Any] | None = None
) -> Path:
    """A plan file with ``[defaults]`` (GRID, TIMING unless overridden) and ``[[job]]`` entries."""
    lines = ["[defaults]"]
    for key, value in {"grid": GRID, **TIMING, **(defaults or {})}.items():
        lines.append(f"{key} = {toml_value(value)}")
    lines += ["", "[report]", f"reference = {toml_value(REFERENCE)}"]
    for job in jobs:
        lines += ["", "[[job]]"] + [f"{k} = {toml_value(v)}" for k, v in job.items()]
    path = folder / "plan.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def two_cpu_jobs(**extra: Any) -> list[dict[str, Any]]:
    return [
        {"name": "tiny-a", "device": "cpu", "model": "tiny", **extra},
        {"name": "tiny-b", "device": "cpu", "model": "tiny", "seed": 1, **extra},
    ]


# ----------------------------------------------------------- job functions (run in workers)
def meet(folder: str, key: str, expected: int, timeout_s: float = 60.0) -> dict[str, Any]:
    """Wait until ``expected`` jobs have arrived here, then say what this one was given.

    Proves that the jobs ran at the same time (so their devices cannot be the same one
    handed out twice in turn).
    """
    Path(folder, key).touch()
    deadline = time.monotonic() + timeout_s
    while len(list(Path(folder).iterdir())) < expected:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{key}: the other jobs never arrived")
        time.sleep(0.02)
    out: dict[str, Any] = {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "pid": os.getpid()}
    try:
        import ray

        if ray.is_initialized():
            out["ray_gpu_ids"] = [str(g) for g in ray.get_gpu_ids()]
    except ImportError:
        pass
    return out


def square(x: int) -> int:
    return x * x


def explode(message: str) -> None:
    raise RuntimeError(message + "\nsecond line of detail")


def die() -> None:
    os.kill(os.getpid(), 9)


def span(seconds: float) -> tuple[float, float]:
    """Sleep; return when this job started and ended (wall clock, comparable across processes)."""
    start = time.time()
    time.sleep(seconds)
    return start, time.time()
