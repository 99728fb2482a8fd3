"""The same checks on a CUDA device, with energy from NVML (skipped without CUDA)."""

import numpy as np
import pytest
import torch
from torchkit import TINY, requests, run_torch, simulated_engine, torch_engine

from servecal.profiler.energy import open_meter
from servecal.profiler.model import build_model
from servecal.profiler.timing import CudaClock, LayerScale
from servecal.sched.torch_executor.forward import ForwardRun, PagedBatch, StopSignal
from servecal.sched.torch_executor.pool import PagedKVPool, PoolConfig

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture(scope="module")
def model():
    return build_model(TINY, "cuda:0", seed=1)  # bf16, as calibration on CUDA


def test_a_cuda_run_agrees_on_token_counts_frees_kv_and_records_energy(model):
    meter, notice = open_meter(model.device)
    reqs = requests(np.random.default_rng(2), 12)
    eng, executor = torch_engine(model, reqs, "sloweave", kv=600, meter=meter)
    result = run_torch(eng, executor)
    sim = simulated_engine(reqs, "sloweave", kv=600).run().requests.set_index("rid")
    real = result.requests.set_index("rid")
    assert (real["tokens_out"] == sim["tokens_out"]).all()
    assert executor.generated == real["tokens_out"].to_dict()
    assert executor.pool.used_blocks == 0
    assert (result.iterations["duration_ms"] > 0).all()
    if meter is None:
        pytest.skip(f"timing checked; no energy counter here: {notice}")
    energy = result.iterations["energy_j"]
    assert energy.notna().all() and (energy >= 0).all() and energy.sum() > 0
    assert result.energy_source.startswith("measured:")


def _prefill(model, ids, stop_at):
    scale = LayerScale(TINY.n_layers, TINY.n_layers)
    pool = PagedKVPool(TINY, TINY.n_layers, PoolConfig(1024, 16, 4), model.device, model.dtype)
    pool.reserve(1, len(ids))
    batch = PagedBatch(pool, [], [], [(1, 0, len(ids))], ids)
    run = ForwardRun(model, batch, CudaClock(model.device), scale)
    if stop_at is None:
        assert run.run()
        return run
    signal = StopSignal()
    assert not run.run(signal, lambda k: signal.request() if k == stop_at else None)
    assert run.next_op == stop_at + 1 and run.blocking_ms[0] >= 0
    assert run.run()
    return run


def test_a_resumed_prefill_matches_an_uninterrupted_one_on_cuda(model):
    ids = torch.randint(0, TINY.vocab, (64,), device=model.device)
    straight, resumed = _prefill(model, ids, None), _prefill(model, ids, 3)
    # bf16: the same kernels on the same inputs, equal within bf16 rounding
    torch.testing.assert_close(resumed.hidden, straight.hidden, rtol=1.6e-2, atol=1e-2)
    torch.testing.assert_close(resumed.logits, straight.logits, rtol=1.6e-2, atol=1e-2)
