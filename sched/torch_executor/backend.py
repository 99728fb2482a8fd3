"""The torch backend of the experiment layer: a spec's run on real forward passes.

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
from typing import TYPE_CHECKING

import numpy as np

from servecal.sched.engine import Engine, EngineConfig
from servecal.sched.observe import Observer
from servecal.sched.policies.registry import ENGINE
from servecal.sched.request import Request
from servecal.sched.result import RunResult
from servecal.sched.torch_executor.executor import PlanTap, TorchExecutor
from servecal.sched.torch_executor.pool import PagedKVPool, PoolConfig
from servecal.sched.torch_executor.setup import TorchSetup, load_setup
from servecal.sched.torch_executor.validation import OnlineValidation
from servecal.util.errors import InputError

if TYPE_CHECKING:
    from servecal.sched.experiment.spec import RunSpec

#: Seconds between progress callbacks (the bar shows live coverage and MAPE).
PROGRESS_EVERY_S = 0.25

_SETUPS: dict[tuple[str, str, str | None], TorchSetup] = {}


@dataclass
class TorchProgress:
    """What a torch run's progress callback sees."""

    tokens_done: int
    tokens_total: int
    validation: OnlineValidation
    drift_state: str | None


def setup_for(spec: RunSpec) -> TorchSetup:
    """The model, device, clock, meter and table of ``spec`` (built once per process;
    its ``notices`` say where the table may not fit this device)."""
    from servecal.sched.experiment.models import table_path
    from servecal.sched.experiment.spec import TorchOptions

    options = spec.torch or TorchOptions()
    path = table_path(spec.predictor)
    if path is None:
        raise InputError(
            "the torch backend needs --predictor TABLE.json, from servecal calibrate "
            "on the same device and model shape"
        )
    key = (str(path), options.device, options.model, spec.trust)
    if key not in _SETUPS:
        _SETUPS[key] = load_setup(path, options.device, options.model, trust=spec.trust)
    return _SETUPS[key]


def run_torch(
    spec: RunSpec,
    requests: list[Request],
    rng: np.random.Generator,
    on_progress: Callable[[TorchProgress], None],
) -> RunResult:
    """Run ``requests`` on the torch executor (``rng``: prompt token ids); the pool
    ends empty. A drift monitor always watches a real run."""
    from servecal.sched.experiment.run import planning_predictor
    from servecal.sched.experiment.spec import TorchOptions

    options = spec.torch or TorchOptions()
    setup = setup_for(spec)
    model = setup.model
    pool = PagedKVPool(
        model.shape,
        len(model.layers),
        PoolConfig(spec.kv_capacity, options.block_size, options.max_seqs),
        model.device,
        model.dtype,
    )
    executor = TorchExecutor(model, pool, setup.scale, setup.clock, rng, setup.meter)
    tap = PlanTap(spec.policy.build(ENGINE))
    validation = OnlineValidation()
    predictor, watching = planning_predictor(spec, monitor=True)
    observers: list[Observer] = [validation, *watching]
    engine = Engine(
        requests,
        tap,
        predictor,
        executor,
        EngineConfig(kv_capacity=spec.kv_capacity),
        observers=observers,
        policy_name=spec.policy.label,
    )
    executor.bind(engine.view, tap)
    total = int(sum(r.output_tokens for r in requests))
    monitor = watching[0] if watching else None
    t0 = time.perf_counter()
    last = t0
    while engine.step():
        now = time.perf_counter()
        if now - last >= PROGRESS_EVERY_S:
            last = now
            state = getattr(monitor, "state", None)
            on_progress(TorchProgress(executor.tokens_generated, total, validation, state))
    executor.release_finished()
    wall_s = time.perf_counter() - t0
    result = engine.result()
    result.observers["TorchExecutor"] = {
        **executor.summary(),
        "wall_s": wall_s,
        "kv_blocks_in_use_at_end": pool.used_blocks,
        "setup": setup.describe(),
    }
    result.counters.update(wall_s=wall_s, busy_s=executor.busy_ms / 1000.0)
    return result
