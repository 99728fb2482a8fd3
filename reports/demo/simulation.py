"""The demo's scheduler runs: calibrated table as predictor, measured samples as truth.

One run per (workload, policy, TPOT target, seed), each written as a run folder
``runs/<workload>/<policy>/tpot-<D>/seed-<k>/`` by the engine's own writer. Runs go
to a process pool; each worker reads the table and samples once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from servecal.reports.demo.setting import DemoSetting


@dataclass(frozen=True)
class RunSpec:
    """One simulated run of the demo grid."""

    workload: str
    policy: str
    tpot_slo_ms: float
    seed: int
    rate: float
    n_requests: int
    folder: str

    def __post_init__(self) -> None:
        if not (self.tpot_slo_ms > 0 and self.rate > 0 and self.n_requests >= 1):
            raise ValueError("RunSpec needs tpot_slo_ms > 0, rate > 0 and n_requests >= 1")


@dataclass(frozen=True)
class Inputs:
    """Files and scaling every worker needs (picklable)."""

    table_path: str
    samples_path: str
    token_scale: float
    time_dilation: float
    c_max: int
    aging_ms: float
    aging_chunk: int
    monitor_points: tuple[tuple[int, int, int, int], ...]


_CACHE: dict[str, Any] = {}


def _load(inputs: Inputs) -> tuple[Any, Any]:
    from servecal.costmodels import CostTable
    from servecal.sched.truth import SampledTruth

    if inputs.table_path not in _CACHE:
        _CACHE[inputs.table_path] = CostTable.load(inputs.table_path)
    if inputs.samples_path not in _CACHE:
        _CACHE[inputs.samples_path] = SampledTruth.load(inputs.samples_path)
    return _CACHE[inputs.table_path], _CACHE[inputs.samples_path]


def _policy(name: str, inputs: Inputs) -> Any:
    from servecal.sched.policies import FixedChunk, FullPrefill, SLOWeave, SLOWeaveConfig

    if name == "sloweave":
        return SLOWeave(
            SLOWeaveConfig(
                c_max=inputs.c_max, aging_ms=inputs.aging_ms, aging_chunk=inputs.aging_chunk
            )
        )
    if name == "full":
        return FullPrefill()
    return FixedChunk(int(name.rsplit("-", 1)[1]))  # demo chunk sizes may be below 64


def scaled_requests(spec: RunSpec, inputs: Inputs, rng: np.random.Generator) -> list:
    """The workload's requests, prompts scaled and TTFT SLOs dilated (see setting.py)."""
    from servecal.sched.workloads import generate

    reqs = generate(
        spec.workload, spec.rate, n_requests=spec.n_requests, tpot_slo_ms=spec.tpot_slo_ms, rng=rng
    )
    return [
        replace(
            r,
            prompt_tokens=max(1, round(r.prompt_tokens * inputs.token_scale)),
            ttft_slo_ms=r.ttft_slo_ms * inputs.time_dilation,
        )
        for r in reqs
    ]


def run_one(spec: RunSpec, inputs: Inputs) -> dict[str, Any]:
    """Simulate one run and write its folder; returns its summary."""
    from servecal.costmodels.drift import DriftMonitor, NoiseProfile
    from servecal.sched.engine import Engine
    from servecal.sched.runfolder import write_run
    from servecal.sched.simulate import summarize_run

    table, truth = _load(inputs)
    workload_ss, executor_ss = np.random.SeedSequence(spec.seed).spawn(2)
    requests = scaled_requests(spec, inputs, np.random.default_rng(workload_ss))
    observers = ()
    if spec.policy == "sloweave":  # the policy a deployment would monitor
        observers = (DriftMonitor(NoiseProfile.from_predictor(table, inputs.monitor_points)),)
    engine = Engine(
        requests,
        _policy(spec.policy, inputs),
        table,
        truth.executor(np.random.default_rng(executor_ss)),
        observers=observers,
        policy_name=spec.policy,
    )
    result = engine.run()
    summary = summarize_run(result)
    config = {
        "workload": spec.workload,
        "policy": spec.policy,
        "tpot_slo_ms": spec.tpot_slo_ms,
        "seed": spec.seed,
        "rate": spec.rate,
        "n_requests": spec.n_requests,
        "truth": f"samples:{inputs.samples_path}",
        "predictor": inputs.table_path,
        "token_scale": inputs.token_scale,
        "time_dilation": inputs.time_dilation,
        "sloweave": {
            "c_max": inputs.c_max,
            "aging_ms": inputs.aging_ms,
            "aging_chunk": inputs.aging_chunk,
        },
    }
    write_run(spec.folder, result, config, summary, {"seed": spec.seed})
    return summary


def plan_runs(setting: DemoSetting, out: Path, seeds: int, n_requests: int) -> list[RunSpec]:
    """Every run of the demo grid, cheapest-first order not needed: all are similar."""
    return [
        RunSpec(w, p, d, s, setting.rates[w], n_requests,
                str(out / w / p / f"tpot-{d:.4g}" / f"seed-{s}"))
        for d in setting.tpot_targets_ms
        for w in setting.rates
        for p in setting.policies
        for s in range(seeds)
    ]  # fmt: skip


def run_all(
    specs: Sequence[RunSpec],
    inputs: Inputs,
    jobs: int | None = None,
    on_done: Callable[[RunSpec], None] | None = None,
) -> None:
    """Run every spec in a process pool; Ctrl-C cancels what has not started."""
    workers = max(1, min(jobs or os.cpu_count() or 1, len(specs)))
    pool = ProcessPoolExecutor(max_workers=workers)
    pending: dict[Future, RunSpec] = {}
    try:
        pending = {pool.submit(run_one, s, inputs): s for s in specs}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                spec = pending.pop(future)
                future.result()
                if on_done is not None:
                    on_done(spec)
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
