"""The paged KV pool: blocks are never handed out twice or beyond storage, all come back."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servecal.profiler.shapes import ModelShape
from servecal.sched.torch_executor.pool import PagedKVPool, PoolConfig, PoolExhausted

TINY = ModelShape.from_name("tiny")


def _pool(capacity: int, block: int, max_seqs: int) -> PagedKVPool:
    return PagedKVPool(TINY, 1, PoolConfig(capacity, block, max_seqs))


def _check_blocks(pool: PagedKVPool) -> None:
    owned = [b for rid in pool.holders() for b in pool.table(rid)]
    assert len(owned) == len(set(owned)), "a block is owned twice"
    assert all(0 <= b < pool.n_blocks for b in owned)
    assert len(owned) == pool.used_blocks <= pool.n_blocks
    assert pool.used_blocks + pool.free_blocks == pool.n_blocks


@settings(max_examples=60, deadline=None)
@given(
    block=st.sampled_from([1, 4, 16]),
    ops=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 40), st.booleans()), max_size=60),
)
def test_engine_like_use_never_over_allocates_and_frees_everything(block, ops):
    capacity, max_seqs = 128, 8
    pool = _pool(capacity, block, max_seqs)
    held: dict[int, int] = {}
    for rid, grow, finish in ops:
        if finish:
            assert pool.free(rid) == held.pop(rid, 0)
        else:
            # the engine's rule: the tokens held by all requests never exceed M
            grow = min(grow, capacity - sum(held.values()))
            new = held.get(rid, 0) + grow
            if new == 0:
                continue
            pool.reserve(rid, new)
            pool.commit(rid, new)
            held[rid] = new
        _check_blocks(pool)
        assert pool.used_tokens == sum(held.values()) <= capacity
        for rid, tokens in held.items():
            assert len(pool.table(rid)) * block >= tokens
    for rid in list(held):
        pool.free(rid)
    assert pool.used_blocks == 0 and pool.used_tokens == 0 and not pool.holders()
    assert pool.peak_tokens <= capacity


def test_a_request_beyond_the_free_blocks_is_refused_not_overlapped():
    pool = _pool(64, 16, 1)  # 4 + 1 spare blocks
    pool.reserve(1, 64)
    pool.reserve(2, 16)
    with pytest.raises(PoolExhausted, match="request 3"):
        pool.reserve(3, 1)
    _check_blocks(pool)
    pool.free(2)
    pool.reserve(3, 16)
    _check_blocks(pool)


def test_commit_beyond_reserved_blocks_is_an_error():
    pool = _pool(64, 16, 4)
    pool.reserve(1, 10)
    with pytest.raises(ValueError, match="exceed"):
        pool.commit(1, 17)


def test_slots_follow_the_block_table():
    pool = _pool(64, 4, 4)
    pool.reserve(1, 4)  # block 0
    pool.reserve(2, 4)  # block 1
    pool.reserve(1, 6)  # block 2
    assert pool.table(1) == (0, 2)
    assert pool.slots(1, 2, 6) == [2, 3, 8, 9]
    blocks, width = pool.padded_blocks([1, 2], [6, 3])
    assert width == 2 and blocks.tolist() == [0, 2, 1, 1]


@pytest.mark.parametrize("bad", [{"capacity_tokens": 0}, {"block_size": 0}, {"max_seqs": 0}])
def test_config_rejects_nonsense(bad):
    with pytest.raises(ValueError):
        PoolConfig(**{"capacity_tokens": 16, **bad})
