"""Worker for the tensor-parallel equivalence test (run in spawned processes: importable)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from servecal.profiler.collective import ProcessGroupCollective
from servecal.profiler.kv import DecodeGroup, IterationBatch, KVPool, PrefillSegment
from servecal.profiler.model import _kv_heads_of_rank, build_model, shard_state_dict
from servecal.profiler.shapes import ModelShape

# tiny splits its 2 KV heads over 2 ranks; "mqa" has 1 KV head, which both ranks replicate.
SHAPES = (
    ModelShape.from_name("tiny"),
    ModelShape(
        "mqa",
        n_layers=2,
        hidden=64,
        n_heads=4,
        n_kv_heads=1,
        head_dim=16,
        intermediate=96,
        vocab=256,
    ),  # fmt: skip
)


def batch_for(pool: KVPool) -> IterationBatch:
    """Three ragged decodes and a prefill chunk after a cached prefix, in one iteration."""
    return IterationBatch(
        DecodeGroup(pool, [0, 1, 2], [5, 9, 3]), [PrefillSegment(pool, 3, prefix=4, chunk=6)]
    )


def shard_pool(full: KVPool, shape: ModelShape, tp: int, rank: int) -> KVPool:
    local = shape.shard(tp)
    pool = KVPool(local, full.k.shape[0], full.slots, full.capacity, full.k.device, full.k.dtype)
    heads = _kv_heads_of_rank(shape, tp, rank)
    pool.k.copy_(full.k[:, :, heads])
    pool.v.copy_(full.v[:, :, heads])
    return pool


def check_equivalence(rank: int, world: int, init_file: str, backend: str = "gloo") -> None:
    """Rank ``rank`` of ``world``: TP forward == TP-1 forward (gloo on CPU, NCCL on GPU r)."""
    device = f"cuda:{rank}" if backend == "nccl" else "cpu"
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        collective = ProcessGroupCollective()
        for shape in SHAPES:
            # float64: the shards' sums in another order then agree to rounding
            full = build_model(shape, device, torch.float64, seed=3)
            tp_model = build_model(shape, device, torch.float64, seed=99, collective=collective)
            tp_model.load_state_dict(shard_state_dict(full.state_dict(), shape, world, rank))
            torch.manual_seed(1)
            pool = KVPool(shape, shape.n_layers, 4, 16, device, torch.float64)
            mine = shard_pool(pool, shape, world, rank)
            tokens = torch.randint(0, shape.vocab, (9,)).to(device)
            with torch.inference_mode():
                want = full(tokens, batch_for(pool))
                got = tp_model(tokens, batch_for(mine))
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
            # the shards wrote their heads' K/V for this iteration like the full model did
            heads = _kv_heads_of_rank(shape, world, rank)
            torch.testing.assert_close(mine.k, pool.k[:, :, heads], rtol=1e-9, atol=1e-9)
    finally:
        dist.destroy_process_group()
