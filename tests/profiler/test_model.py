"""The torch model: one forward pass per iteration, real KV, chunked prefill == whole prefill."""

import pytest
import torch

from servecal.profiler.kv import DecodeGroup, IterationBatch, KVPool, PrefillSegment
from servecal.profiler.model import build_model
from servecal.profiler.shapes import ModelShape

SHAPE = ModelShape(
    "t", n_layers=2, hidden=64, n_heads=4, n_kv_heads=2, head_dim=16, intermediate=128, vocab=97
)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(SHAPE, "cpu", torch.float64, seed=1)


def pool(slots: int, capacity: int) -> KVPool:
    return KVPool(SHAPE, SHAPE.n_layers, slots, capacity, "cpu", torch.float64)


def prefill(model, tokens, kv, prefix=0):
    seg = PrefillSegment(kv, 0, prefix, len(tokens))
    with torch.inference_mode():
        return model(torch.tensor(tokens), IterationBatch(prefills=[seg]))


def test_build_model_is_seeded_and_has_requested_layers():
    a = build_model(SHAPE, "cpu", seed=3, n_layers=1)
    b = build_model(SHAPE, "cpu", seed=3, n_layers=1)
    assert len(a.layers) == 1 and a.dtype == torch.float32
    assert torch.equal(a.layers[0].wqkv.weight, b.layers[0].wqkv.weight)
    with pytest.raises(ValueError):
        build_model(SHAPE, "cpu", n_layers=3)


def test_chunked_prefill_with_prefix_matches_one_chunk(model):
    prompt = [5, 17, 3, 88, 42, 7, 61, 29, 11]
    whole = prefill(model, prompt, pool(1, 16))
    kv = pool(1, 16)
    prefill(model, prompt[:4], kv)
    chunked = prefill(model, prompt[4:], kv, prefix=4)
    torch.testing.assert_close(chunked, whole)


def test_prefill_writes_its_kv_and_decode_reads_it(model):
    prompt = [5, 17, 3, 88, 42]
    kv = pool(1, 16)
    before = kv.k[:, 0, :, :5].clone()
    prefill(model, prompt, kv)
    assert not torch.equal(kv.k[:, 0, :, :5], before)
    # Decoding token 9 after the prompt == prefilling prompt + [9] in one go.
    batch = IterationBatch(decode=DecodeGroup(kv, [0], [5]))
    with torch.inference_mode():
        decoded = model(torch.tensor([9]), batch)
    whole = prefill(model, prompt + [9], pool(1, 16))
    torch.testing.assert_close(decoded, whole)
    batch.advance()
    assert list(batch.decode.lengths) == [6]


def test_ragged_scattered_decodes_match_one_by_one(model):
    kv = pool(4, 16)
    prompts = {1: [3, 4, 5], 3: [9, 8, 7, 6, 5, 4]}
    for slot, p in prompts.items():
        with torch.inference_mode():
            model(torch.tensor(p), IterationBatch(prefills=[PrefillSegment(kv, slot, 0, len(p))]))
    k_saved, v_saved = kv.k.clone(), kv.v.clone()
    batch = IterationBatch(decode=DecodeGroup(kv, [3, 1], [6, 3]))
    with torch.inference_mode():
        together = model(torch.tensor([11, 12]), batch)
    alone = []
    for slot, length, tok in ((3, 6, 11), (1, 3, 12)):
        kv.k.copy_(k_saved)
        kv.v.copy_(v_saved)
        with torch.inference_mode():
            alone.append(
                model(torch.tensor([tok]), IterationBatch(DecodeGroup(kv, [slot], [length])))
            )
    torch.testing.assert_close(together, torch.cat(alone))


def test_mixed_iteration_and_split_halves(model):
    dec, pre = pool(3, 8), pool(1, 12)
    batch = IterationBatch(DecodeGroup(dec, [0, 1, 2], [4, 4, 4]), [PrefillSegment(pre, 0, 2, 5)])
    tokens = torch.arange(batch.n_tokens) % SHAPE.vocab
    with torch.inference_mode():
        logits = model(tokens, batch)
        assert logits.shape == (batch.n_logits, SHAPE.vocab) == (4, SHAPE.vocab)
        # Stop between attention and MLP of layer 1, then resume: same answer.
        ictx = model.prepare(batch)
        x = model.run_layers(model.embed(tokens), batch, ictx, 0, 1)
        x = model.layers[1].attention(x, batch, ictx)
        x = model.layers[1].mlp(x)
        torch.testing.assert_close(model.head(x, ictx), logits)


def test_batch_validation():
    kv = pool(1, 4)
    with pytest.raises(ValueError):
        IterationBatch()
    with pytest.raises(ValueError):
        PrefillSegment(kv, 0, 2, 3)  # 5 tokens > capacity 4
    with pytest.raises(ValueError):
        DecodeGroup(kv, [0], [4])  # no room for the new token


def test_a_cuda_model_keeps_attention_off_cudnn_and_a_cpu_one_leaves_it():
    """cuDNN's SDPA builds a graph per new shape (the torch executor's decode shapes change
    every step): a CUDA build turns it off; a CPU build leaves torch's setting alone."""
    from servecal.profiler.model import keep_attention_off_cudnn

    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        keep_attention_off_cudnn("cpu")
        assert torch.backends.cuda.cudnn_sdp_enabled()
        keep_attention_off_cudnn(torch.device("cuda", 0))  # a flag: no device needed
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)
