"""Factories for torch-executor tests: a tiny model setup and engines on it (not a test module)."""

from __future__ import annotations

import numpy as np
import torch

from servecal.costmodels import AnalyticPredictor
from servecal.profiler.model import build_model
from servecal.profiler.shapes import ModelShape
from servecal.profiler.timing import LayerScale, make_clock
from servecal.sched.engine import Engine, EngineConfig
from servecal.sched.policies import make_policy
from servecal.sched.request import Request
from servecal.sched.torch_executor import PagedKVPool, PlanTap, PoolConfig, TorchExecutor
from servecal.sched.truth import AnalyticTruth

TINY = ModelShape.from_name("tiny")


def tiny_model(device: str = "cpu"):
    torch.set_num_threads(1)
    return build_model(TINY, device, seed=1)


def requests(rng: np.random.Generator, n: int, gap_ms: float = 20.0) -> list[Request]:
    """Short prompts and outputs, arriving ``gap_ms`` apart on average."""
    t, out = 0.0, []
    for rid in range(n):
        t += float(rng.exponential(gap_ms))
        prompt, tokens = int(rng.integers(4, 90)), int(rng.integers(1, 24))
        out.append(Request(rid, t, prompt, tokens, tpot_slo_ms=50.0))
    return out


def torch_engine(model, reqs, policy: str, kv: int, block: int = 8, meter=None):
    """An engine whose iterations run on ``model``; returns (engine, executor)."""
    pool = PagedKVPool(
        TINY, len(model.layers), PoolConfig(kv, block, 64), model.device, model.dtype
    )
    scale = LayerScale(len(model.layers), TINY.n_layers)
    executor = TorchExecutor(
        model, pool, scale, make_clock(model.device), np.random.default_rng(0), meter
    )
    tap = PlanTap(make_policy(policy))
    eng = Engine(reqs, tap, AnalyticPredictor(), executor, EngineConfig(kv_capacity=kv))
    executor.bind(eng.view, tap)
    return eng, executor


def simulated_engine(reqs, policy: str, kv: int) -> Engine:
    ex = AnalyticTruth().executor(np.random.default_rng(0))
    return Engine(reqs, make_policy(policy), AnalyticPredictor(), ex, EngineConfig(kv_capacity=kv))


def run_torch(eng: Engine, executor: TorchExecutor):
    """Run to the end, checking the KV invariant after every step; return the result."""
    m = eng.state.kv_capacity
    while eng.step():
        assert executor.pool.used_tokens <= m
        assert executor.pool.used_blocks <= executor.pool.n_blocks
    executor.release_finished()
    return eng.result()
