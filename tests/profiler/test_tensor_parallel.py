"""Tensor parallelism in the profiler's model: shards compute what the whole model does."""

import pytest
import torch.multiprocessing as mp
from tpworker import check_equivalence

from servecal.profiler.shapes import ModelShape
from servecal.util.errors import InputError


def test_tp2_forward_over_gloo_equals_the_tp1_forward(tmp_path):
    # Column/row-parallel projections, split (tiny) and replicated (mqa) KV heads,
    # vocabulary-parallel embedding and head: logits and written K/V match TP 1.
    mp.spawn(check_equivalence, args=(2, str(tmp_path / "store")), nprocs=2, join=True)


def test_shard_splits_like_vllm():
    s = ModelShape.from_name("llama-3-70b")
    four, sixteen = s.shard(4), ModelShape("x", 2, 8192, 64, 8, 128, 28672, 128256).shard(16)
    assert (four.n_heads, four.n_kv_heads, four.intermediate, four.vocab) == (16, 2, 7168, 32064)
    assert (four.hidden, four.head_dim, four.n_layers) == (8192, 128, 80)
    assert (sixteen.n_heads, sixteen.n_kv_heads) == (4, 1)  # KV heads replicated
    assert s.shard(1) is s
    with pytest.raises(InputError, match="--tp 3 does not divide llama-3-70b's query heads 64"):
        s.shard(3)
    with pytest.raises(InputError, match="KV heads"):
        ModelShape("y", 2, 64, 12, 4, 16, 96, 96).check_tp(6)
