"""A simulated configuration run for real: ``servecal simulate --executor torch``.

Same requests as the simulated executor for a seed (``SeedSequence(seed).spawn(2)``:
the workload's stream, then the executor's, which here draws the prompts' token
ids), same engine and policy; the executor runs each iteration on the model and
the cost table's predictions are checked against it as they happen
(:class:`~.validation.OnlineValidation`, and a drift monitor whose noise profile
comes from the table's calibration samples when they are beside it). The clock
the engine advances is the sum of measured iteration times plus idle gaps between
arrivals (skipped, not slept), so a run's wall time is the device-busy time plus
the engine's overhead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servecal.sched.engine import Engine, EngineConfig
from servecal.sched.observe import Observer
from servecal.sched.policies import parse_policy
from servecal.sched.result import RunResult
from servecal.sched.simulate import SimulationConfig, summarize_run
from servecal.sched.torch_executor.executor import PlanTap, TorchExecutor
from servecal.sched.torch_executor.pool import PagedKVPool, PoolConfig
from servecal.sched.torch_executor.setup import TorchSetup
from servecal.sched.torch_executor.validation import OnlineValidation

#: Seconds between progress callbacks (the bar shows live coverage and MAPE).
PROGRESS_EVERY_S = 0.25


@dataclass(frozen=True)
class TorchRunOptions:
    """``block_size``: KV block tokens; ``max_seqs``: requests holding KV at once (spare
    blocks); ``monitor``: attach a drift monitor (always on by default: a real run is
    what it is for; ``SimulationConfig.adaptive_margin`` also plans with its margins)."""

    block_size: int = 16
    max_seqs: int = 512
    monitor: bool = True

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.max_seqs < 1:
            raise ValueError("block_size and max_seqs must be >= 1")


@dataclass
class Progress:
    """What the progress callback sees."""

    tokens_done: int
    tokens_total: int
    validation: OnlineValidation
    drift_state: str | None


def noise_profile(setup: TorchSetup) -> Any:
    """The drift monitor's noise profile from the table's calibration samples
    (``samples.parquet`` beside the table: residuals ``log(ms / P50)`` at the measured
    grid points), or ``None`` (the monitor then reads the table's own P50→P99 spread)."""
    samples = setup.table_path.parent / "samples.parquet"
    if not samples.is_file():
        return None
    from servecal.costmodels.drift import NoiseProfile
    from servecal.costmodels.samples import read_samples

    frame = read_samples(samples).frame
    args = [frame[c].to_numpy(dtype=float) for c in ("n_decode", "chunk", "ctx", "prefix")]
    p50 = np.asarray(setup.table.predict(*args, q=0.5), dtype=float)
    ratio = np.log(frame["ms"].to_numpy(dtype=float) / p50)
    try:
        return NoiseProfile.from_residuals(ratio, source=f"calibration residuals ({samples})")
    except ValueError:  # too few rows
        return None


def run_torch_seed(
    config: SimulationConfig,
    seed: int,
    setup: TorchSetup,
    options: TorchRunOptions | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> tuple[RunResult, TorchExecutor]:
    """Run ``config`` once with ``seed`` on the torch executor; the pool ends empty."""
    from servecal.sched.workloads import generate

    options = options or TorchRunOptions()
    workload_ss, executor_ss = np.random.SeedSequence(seed).spawn(2)
    requests = generate(
        config.workload,
        config.rate,
        n_requests=config.n_requests,
        tpot_slo_ms=config.tpot_slo_ms,
        rng=np.random.default_rng(workload_ss),
    )
    model = setup.model
    pool = PagedKVPool(
        model.shape,
        len(model.layers),
        PoolConfig(config.kv_capacity, options.block_size, options.max_seqs),
        model.device,
        model.dtype,
    )
    executor = TorchExecutor(
        model, pool, setup.scale, setup.clock, np.random.default_rng(executor_ss), setup.meter
    )
    tap = PlanTap(parse_policy(config.policy, config.sloweave))
    validation = OnlineValidation()
    observers: list[Observer] = [validation]
    predictor: Any = setup.table
    monitor = None
    if options.monitor or config.monitor or config.adaptive_margin:
        from servecal.costmodels.drift import watch

        # the same hook as the simulated path: plan with adapted margins if asked
        predictor, monitor = watch(
            setup.table, adaptive=config.adaptive_margin, profile=noise_profile(setup)
        )
        observers.append(monitor)
    engine = Engine(
        requests,
        tap,
        predictor,
        executor,
        EngineConfig(kv_capacity=config.kv_capacity),
        observers=observers,
        policy_name=config.policy,
    )
    executor.bind(engine.view, tap)
    total = int(sum(r.output_tokens for r in requests))
    t0 = time.perf_counter()
    last = t0
    while engine.step():
        now = time.perf_counter()
        if on_progress is not None and now - last >= PROGRESS_EVERY_S:
            last = now
            state = getattr(monitor, "state", None)
            on_progress(Progress(executor.tokens_generated, total, validation, state))
    executor.release_finished()
    wall_s = time.perf_counter() - t0
    result = engine.result()
    result.observers["TorchExecutor"] = {
        **executor.summary(),
        "wall_s": wall_s,
        "kv_blocks_in_use_at_end": pool.used_blocks,
        "setup": setup.describe(),
    }
    return result, executor


def simulate_torch(
    config: SimulationConfig,
    setup: TorchSetup,
    out: str | Path | None = None,
    options: TorchRunOptions | None = None,
    on_progress: Callable[[int, Progress], None] | None = None,
) -> dict[str, Any]:
    """Every seed of ``config`` on the torch executor; run folders under ``out``; means."""
    from servecal.sched.metrics import mean_over_seeds
    from servecal.sched.runfolder import write_run

    summaries = []
    for seed in config.seeds:
        progress = None if on_progress is None else (lambda p, s=seed: on_progress(s, p))
        result, executor = run_torch_seed(config, seed, setup, options, progress)
        summary = summarize_run(result)
        summary["wall_s"] = result.observers["TorchExecutor"]["wall_s"]
        summary["busy_s"] = executor.busy_ms / 1000.0
        summaries.append(summary)
        if out is not None:
            write_run(
                Path(out) / f"seed-{seed}",
                result,
                {**config.describe(), "seed": seed, "executor": "torch", **setup.describe()},
                summary,
                {"seed": seed, "streams": "SeedSequence(seed).spawn(2): workload, prompt ids"},
            )
    return mean_over_seeds(summaries)
