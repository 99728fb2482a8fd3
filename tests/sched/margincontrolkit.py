"""What the margin-controller tests share (tests/sched/test_miss_control.py,
tests/sched/test_region_control.py): SLOWeave's run spec under a ``margin_control``,
its max goodput by the compare search, and the vLLM planner deciding beside the
engine's ``controlled_chunk`` with one controller each."""

from __future__ import annotations

from typing import Any

from servecal.sched import experiment as ex
from servecal.sched.experiment.goodput import Bracket, search_sequentially
from servecal.sched.policies.margin import MarginControl
from servecal.sched.policies.registry import PolicySpec
from servecal.sched.policies.sloweave import SLOWeaveConfig, controlled_chunk


def sloweave_spec(
    truth: str,
    control: str,
    requests: int = 300,
    workload: str = "long",
    predictor: str | None = None,
) -> ex.RunSpec:
    """SLOWeave with ``margin_control=control`` on ``workload`` (10 ms TPOT, 1 s TTFT
    scale) under ``truth``; ``predictor``: the table it plans with (the default's when
    ``None``)."""
    extra = {} if predictor is None else {"predictor": predictor}
    return ex.RunSpec(
        workload, PolicySpec.parse("sloweave", {"margin_control": control}), 10.0, 1.0,
        n_requests=requests, truth=truth, **extra,
    )  # fmt: skip


def max_goodput(spec: ex.RunSpec) -> tuple[float, dict[str, Any]]:
    """The highest rate ``spec`` meets its attainment target at (one seed, the compare
    search, bound by a measurement) and the run's summary there."""
    seen: dict[float, dict[str, Any]] = {}

    def attainment(rate: float) -> float:
        at = spec.at_rate(rate)
        seen[rate] = ex.summarize(at, ex.run(at, 0))
        return seen[rate]["attainment"]

    found = search_sequentially(attainment, Bracket(1.0, 200.0))
    assert found.bound == "measured"
    return found.rate, seen[found.rate]


def plugin_beside_engine(
    cfg: SLOWeaveConfig, steps: int = 60
) -> tuple[MarginControl, MarginControl, list[int]]:
    """The vLLM planner and the engine's ``controlled_chunk``, each with its own
    controller from ``cfg``, deciding the same steps (8 decodes at 1,024 context, a
    deadline 10 ms away, every fourth step overshooting it): asserts each step's chunk
    is the same; returns (plugin's controller, engine's, the chunks)."""
    from servecal.integrations.vllm.planner import StepState, plan_step
    from servecal.sched.experiment.models import load_predictor

    table = load_predictor("fitted", "device")
    plugin, engine = cfg.controller(), cfg.controller()
    assert plugin is not None and engine is not None
    now, chunks = 0.0, []
    for step in range(steps):
        deadline = now + 10.0
        plan = plan_step(StepState(now, 8, 8, 1024.0, deadline, 0, 5000, 8192), table, cfg, plugin)
        c, _, _ = controlled_chunk(engine, table, cfg, 8, 1024.0, 0, 4096, now, deadline, 0.0)
        assert plan.chunk == c
        chunks.append(c)
        now = deadline + (0.5 if step % 4 == 0 else -1.0)  # every fourth step overshoots
    assert plugin.summary() == engine.summary()
    return plugin, engine, chunks
