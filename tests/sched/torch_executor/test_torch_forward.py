"""Paged forward passes: same numbers as the profiler's, and stop/resume at operator boundaries."""

import numpy as np
import pytest
import torch

from servecal.profiler.kv import DecodeGroup, IterationBatch, KVPool, PrefillSegment
from servecal.profiler.model import build_model
from servecal.profiler.shapes import ModelShape
from servecal.profiler.timing import CpuClock, LayerScale
from servecal.sched.torch_executor import forward
from servecal.sched.torch_executor.forward import ForwardRun, PagedBatch, StopSignal
from servecal.sched.torch_executor.pool import PagedKVPool, PoolConfig, length_buckets

TINY = ModelShape.from_name("tiny")
SCALE = LayerScale(TINY.n_layers, TINY.n_layers)


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    return build_model(TINY, "cpu", torch.float32, seed=3)


def _pool(block: int = 8) -> PagedKVPool:
    return PagedKVPool(TINY, TINY.n_layers, PoolConfig(4096, block, 16))


def _ids(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, TINY.vocab, (n,), generator=torch.Generator().manual_seed(seed))


def _prefill(model, pool, rid, ids, prefix=0, stop_at=None, between=None):
    """Prefill ``ids[prefix:]`` of ``rid`` (after ``prefix`` cached); returns the run."""
    pool.reserve(rid, len(ids))
    batch = PagedBatch(pool, [], [], [(rid, prefix, len(ids) - prefix)], ids[prefix:])
    run = ForwardRun(model, batch, CpuClock(), SCALE)
    if stop_at is None:
        assert run.run()
    else:
        signal = StopSignal()
        hook = lambda k: signal.request() if k == stop_at else None  # noqa: E731
        assert not run.run(signal, on_operator=hook)
        assert run.next_op == stop_at + 1  # stopped right after the operator in flight
        if between is not None:
            between()
        assert run.run()
    pool.commit(rid, len(ids))
    return run


def test_paged_prefill_then_decode_match_the_profilers_contiguous_kv(model):
    ids = _ids(40, 0)
    # profiler: one contiguous slot, prefill 24 + 16 with prefix, then a decode
    ref = KVPool(TINY, TINY.n_layers, 1, 64, "cpu", torch.float32)
    with torch.inference_mode():
        model(ids[:24], IterationBatch(None, [PrefillSegment(ref, 0, 0, 24)]))
        want_prefill = model(ids[24:], IterationBatch(None, [PrefillSegment(ref, 0, 24, 16)]))
        nxt = want_prefill.argmax(-1)
        want_decode = model(nxt, IterationBatch(DecodeGroup(ref, [0], [40]), []))
    pool = _pool(block=8)
    _prefill(model, pool, 7, ids[:24])
    got_prefill = _prefill(model, pool, 7, ids, prefix=24).logits
    torch.testing.assert_close(got_prefill, want_prefill, rtol=1e-4, atol=1e-5)
    pool.reserve(7, 41)
    run = ForwardRun(model, PagedBatch(pool, [7], [40], [], nxt), CpuClock(), SCALE)
    run.run()
    torch.testing.assert_close(run.logits, want_decode, rtol=1e-4, atol=1e-5)
    assert run.duration_ms > 0


def _split_cost(lengths: list[int], price: int, cuts: tuple[int, ...]) -> int:
    bounds = [0, *cuts, len(lengths)]
    pairs = zip(bounds, bounds[1:], strict=False)
    return sum((b - a) * max(lengths[a:b]) + price for a, b in pairs)


def test_length_buckets_minimise_padded_keys_plus_calls() -> None:
    from itertools import combinations

    rng = np.random.default_rng(0)
    for _ in range(200):
        lengths = sorted(rng.integers(1, 400, rng.integers(1, 8)).tolist(), reverse=True)
        price = int(rng.integers(0, 300))
        n = len(lengths)
        splits = (c for k in range(n) for c in combinations(range(1, n), k))
        best = min(_split_cost(lengths, price, c) for c in splits)
        runs = length_buckets(lengths, price)
        assert runs[0][0] == 0 and runs[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(runs, runs[1:], strict=False))
        assert sum((b - a) * w + price for a, b, w in runs) == best


@pytest.mark.parametrize("call_keys", [384, 10, 0])  # one bucket, two, one per row
def test_ragged_decodes_and_a_chunk_in_one_pass_match_separate_passes(model, call_keys):
    pool = _pool(block=4)
    pool.bucket_call_keys = call_keys
    lengths = {1: 9, 2: 17, 3: 5}
    for rid, n in lengths.items():
        _prefill(model, pool, rid, _ids(n, rid))
    _prefill(model, pool, 4, _ids(30, 4)[:12])
    last = _ids(3, 99)
    for rid, n in lengths.items():
        pool.reserve(rid, n + 1)
    pool.reserve(4, 30)
    tokens = torch.cat([last, _ids(30, 4)[12:]])
    batch = PagedBatch(pool, [1, 2, 3], [9, 17, 5], [(4, 12, 18)], tokens)
    assert len(batch.decode_buckets) == {384: 1, 10: 2, 0: 3}[call_keys]
    joint = ForwardRun(model, batch, CpuClock(), SCALE)
    joint.run()
    # the same work one request at a time, on a fresh pool holding the same prompts
    alone = _pool(block=4)
    rows = []
    for i, (rid, n) in enumerate(lengths.items()):
        _prefill(model, alone, rid, _ids(n, rid))
        alone.reserve(rid, n + 1)
        r = ForwardRun(model, PagedBatch(alone, [rid], [n], [], last[i : i + 1]), CpuClock(), SCALE)
        r.run()
        rows.append(r.logits)
    _prefill(model, alone, 4, _ids(30, 4)[:12])
    rows.append(_prefill(model, alone, 4, _ids(30, 4), prefix=12).logits)
    torch.testing.assert_close(joint.logits, torch.cat(rows), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("stop_at", [0, 3, 6])
def test_preempted_and_resumed_prefill_equals_an_uninterrupted_one(model, stop_at):
    ids = _ids(48, 5)
    straight = _pool()
    _prefill(model, straight, 1, ids[:16])
    want = _prefill(model, straight, 1, ids, prefix=16)
    resumed = _pool()
    _prefill(model, resumed, 1, ids[:16])
    _prefill(model, resumed, 2, _ids(20, 6))

    def other_work():  # decodes of another request run while the prefill is parked
        for step in range(3):
            resumed.reserve(2, 21 + step)
            batch = PagedBatch(resumed, [2], [20 + step], [], _ids(1, 50 + step))
            ForwardRun(model, batch, CpuClock(), SCALE).run()
            resumed.commit(2, 21 + step)

    got = _prefill(model, resumed, 1, ids, prefix=16, stop_at=stop_at, between=other_work)
    torch.testing.assert_close(got.hidden, want.hidden, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-5, atol=1e-6)
    # the parked request's KV survived the other request's iterations
    layer0 = want.batch.pool.k[0].view(2, -1, TINY.head_dim)
    slots_w = torch.tensor(straight.slots(1, 0, 48))
    slots_g = torch.tensor(resumed.slots(1, 0, 48))
    got_k = resumed.k[0].view(2, -1, TINY.head_dim)[:, slots_g]
    torch.testing.assert_close(got_k, layer0[:, slots_w], rtol=1e-5, atol=1e-6)
    assert got.stops == 1 and len(got.blocking_ms) == 1 and got.blocking_ms[0] >= 0
    assert got.duration_ms > 0


def test_a_stop_request_from_before_the_pass_stops_it_after_the_embedding(model):
    pool = _pool()
    pool.reserve(1, 8)
    run = ForwardRun(model, PagedBatch(pool, [], [], [(1, 0, 8)], _ids(8, 1)), CpuClock(), SCALE)
    signal = StopSignal()
    signal.request()
    assert not run.run(signal)
    assert run.next_op == 0 and run.hidden is not None and not run.done
    assert not signal.pending
    assert run.run(signal) and run.done


def test_a_batch_must_hold_its_tokens():
    pool = _pool()
    pool.reserve(1, 4)
    with pytest.raises(ValueError, match="tokens"):
        PagedBatch(pool, [], [], [(1, 0, 4)], _ids(3, 0))
    with pytest.raises(ValueError, match="at least one"):
        PagedBatch(pool, [], [], [], _ids(0, 0))


def _decode_steps(model, pool, lengths: dict[int, int], steps: int, regather: bool):
    """``steps`` decodes of the whole group (greedy tokens); per step its logits and
    the identity of layer 0's decode view. ``regather``: drop the views before each
    step, so every step gathers every block from the pool."""
    last = _ids(len(lengths), 98)
    out = []
    for _ in range(steps):
        if regather:
            pool.decode_views.clear()
        for rid, n in lengths.items():
            pool.reserve(rid, n + 1)
        batch = PagedBatch(pool, list(lengths), list(lengths.values()), [], last)
        run = ForwardRun(model, batch, CpuClock(), SCALE)
        assert run.run()
        for rid, n in lengths.items():
            pool.commit(rid, n + 1)
            lengths[rid] = n + 1
        last = run.logits.argmax(-1)
        out.append((run.logits, id(pool.decode_views[0])))
    return out


def test_consecutive_decodes_append_to_the_view_and_match_a_full_gather(model, monkeypatch):
    monkeypatch.setattr(forward, "DECODE_VIEW_SLACK", 5)  # outgrown within the steps
    pools = []
    for _ in range(2):
        pool = _pool(block=4)
        for rid, n in {1: 9, 2: 17, 3: 5}.items():
            _prefill(model, pool, rid, _ids(n, rid))
        pools.append(pool)
    appended = _decode_steps(model, pools[0], {1: 9, 2: 17, 3: 5}, 9, regather=False)
    gathered = _decode_steps(model, pools[1], {1: 9, 2: 17, 3: 5}, 9, regather=True)
    for (got, _), (want, _) in zip(appended, gathered, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    views = [view for _, view in appended]
    assert views[1] == views[0]  # step 2 appended to step 1's view
    assert len(set(views)) >= 2  # and the group outgrew it (slack 5) and was gathered again
    assert pools[0].decode_views[0].lengths == [18, 26, 14]


def test_a_changed_group_carries_the_rows_it_held_and_matches_a_full_gather(model):
    """A request finishes (freed: its row is voided) and another joins: the next view
    copies the staying rows, gathers only the newcomer, and gives a full gather's logits."""
    pools = []
    for _ in range(2):
        pool = _pool(block=4)
        for rid, n in {1: 9, 2: 17, 3: 5}.items():
            _prefill(model, pool, rid, _ids(n, rid))
        pools.append(pool)
    results = []
    for pool, regather in zip(pools, (False, True), strict=True):
        lengths = {1: 9, 2: 17, 3: 5}
        _decode_steps(model, pool, lengths, 2, regather=regather)
        pool.free(2)
        if not regather:
            assert pool.decode_views[0].rids == (1, -1, 3)  # voided, not dropped
        del lengths[2]
        _prefill(model, pool, 4, _ids(12, 4))
        lengths[4] = 12
        results.append(_decode_steps(model, pool, lengths, 3, regather=regather))
    for (got, _), (want, _) in zip(*results, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert pools[0].decode_views[0].rids == (1, 3, 4)
    assert pools[0].decode_views[0].lengths == [14, 10, 15]
