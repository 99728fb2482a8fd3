"""The torch executor under the engine: token counts, KV accounting, recompute preemption."""

import numpy as np
import pytest
from torchkit import TINY, requests, run_torch, simulated_engine, tiny_model, torch_engine

from servecal.sched.request import Request


@pytest.fixture(scope="module")
def model():
    return tiny_model()


@pytest.mark.parametrize("policy", ["sloweave", "fixed-64", "budget-48"])
def test_torch_and_simulated_executors_agree_on_every_requests_token_count(model, policy):
    reqs = requests(np.random.default_rng(4), 14)
    eng, executor = torch_engine(model, reqs, policy, kv=600)
    real = run_torch(eng, executor).requests.set_index("rid")
    sim = simulated_engine(reqs, policy, kv=600).run().requests.set_index("rid")
    assert (real["tokens_out"] == sim["tokens_out"]).all()
    assert (real["tokens_out"] == real["output_tokens"]).all()
    # the executor really produced each of those tokens (argmax of the model's logits)
    assert {rid: executor.generated[rid] for rid in real.index} == real["tokens_out"].to_dict()
    assert executor.pool.used_blocks == 0 and executor.pool.used_tokens == 0
    assert 0 < executor.pool.peak_tokens <= 600


def test_recompute_preemption_frees_kv_and_the_request_reprefills_its_outputs(model):
    # both prompts fit M; their decodes grow past it: the later one is evicted
    reqs = [Request(0, 0.0, 30, 40, tpot_slo_ms=50.0), Request(1, 0.0, 30, 40, tpot_slo_ms=50.0)]
    eng, executor = torch_engine(model, reqs, "fixed-64", kv=100, block=4)
    result = run_torch(eng, executor)
    assert result.recomputes >= 1
    assert executor.frees >= 3  # a preemption and two completions
    assert (result.requests["tokens_out"] == 40).all()
    assert executor.generated == {0: 40, 1: 40}
    assert executor.pool.used_blocks == 0


def test_tokens_are_the_models_argmax(model):
    import torch

    req = Request(0, 0.0, 12, 3, tpot_slo_ms=50.0)
    eng, executor = torch_engine(model, [req], "full", kv=64)
    run_torch(eng, executor)
    # replay the same prompt through the plain model: the same greedy continuation
    prompt = np.random.default_rng(0).integers(0, TINY.vocab, size=12).tolist()
    seq = list(prompt)
    with torch.inference_mode():
        for _ in range(3):
            logits = model.lm_head(model.norm(_plain_hidden(model, seq)))[-1]
            seq.append(int(logits.argmax()))
    assert executor.generated == {0: 3}
    assert executor._seq.get(0) is None  # dropped once done
    assert executor.outputs[0] == seq[12:]


def _plain_hidden(model, seq):
    import torch

    from servecal.profiler.kv import IterationBatch, KVPool, PrefillSegment

    pool = KVPool(TINY, len(model.layers), 1, len(seq), "cpu", model.dtype)
    batch = IterationBatch(None, [PrefillSegment(pool, 0, 0, len(seq))])
    ictx = model.prepare(batch)
    return model.run_layers(model.embed(torch.tensor(seq)), batch, ictx)


def test_execute_before_bind_is_an_error(model):
    from servecal.profiler.timing import CpuClock, LayerScale
    from servecal.sched.torch_executor import PagedKVPool, PoolConfig, TorchExecutor

    pool = PagedKVPool(TINY, 4, PoolConfig(64))
    ex = TorchExecutor(model, pool, LayerScale(4, 4), CpuClock(), np.random.default_rng(0))
    with pytest.raises(RuntimeError, match="bind"):
        ex.execute(1, 0, 4.0, 0.0, 0.0)
