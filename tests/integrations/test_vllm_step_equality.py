"""The plug-in's kept KV sum inside vLLM's real scheduler: exact, and deciding alike.

Two plug-in schedulers take the same random traffic on the same fake clock: one
keeps the running requests' KV sum between steps (the default), the other recounts
it every step (the plain pass it replaces). KV is small enough that vLLM preempts,
requests finish and some are aborted. Before every ``schedule()`` the kept sum
equals a recount, and every step's decision and log row are identical.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from vllmguard import require_vllm

require_vllm()

import vllmkit as K  # noqa: E402
from vllm.v1.request import RequestStatus  # noqa: E402

from servecal.costmodels.synthetic import SyntheticTruth  # noqa: E402
from servecal.costmodels.table import AXES, CostTable, Margin  # noqa: E402
from servecal.integrations.vllm.kvsum import RunningKV  # noqa: E402

GRID = {"n_decode": [0, 1, 4, 16, 64], "ctx": [0, 512, 2048], "prefix": [0, 2048],
        "chunk": [0, 1, 64, 256, 1024]}  # fmt: skip


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("kv")
    K.write_model(root / "model")
    truth = SyntheticTruth(decode_attention=2e-5, prefill_attention=2e-7)
    mesh = np.meshgrid(*(np.asarray(GRID[a], dtype=float) for a in AXES), indexing="ij")
    p50 = truth.median(mesh[0], mesh[3], mesh[1], mesh[2])
    CostTable(GRID, {0.5: p50, 0.99: p50 * 1.1}, Margin(0.99, 0.02, 0.99, None, 1, 1)).save(
        root / "table.json"
    )
    return root


def pair(root: Path, async_scheduling: bool):
    built = []
    for name in ("kept", "plain"):  # each logs a run folder of its own (the rows compared)
        settings = {"table": str(root / "table.json"), "tpot_slo_ms": 6.0, "check_model": False,
                    "run_dir": str(root / f"run-{name}-{async_scheduling}")}  # fmt: skip
        args = K.engine_args(root / "model", settings, async_scheduling=async_scheduling, seqs=24)
        built.append(K.build(args, num_blocks=80))  # 1280 KV tokens
    kept, plain = built
    plain._sw_kv = RunningKV(trusted=False)  # the old path: a pass every step
    clocks = [K.FakeClock(), K.FakeClock()]
    for s, clock in zip((kept, plain), clocks, strict=True):
        K.use_clock(s, clock)
    return (kept, plain), clocks


def row(s, out) -> list[float]:
    r = s._sw_inflight[id(out)].row
    return [v for i, v in enumerate(r) if i != 7]  # 7: the decision's own time


def same(a: list[float], b: list[float]) -> bool:
    return all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_kept_sum_is_exact_and_decisions_match_the_recount(root: Path, async_scheduling: bool):
    (kept, plain), clocks = pair(root, async_scheduling)
    rng = np.random.default_rng(11)
    made = aborted = preempted = checked = 0
    pending: list[tuple] = []  # async: each scheduler's step in flight
    for k in range(500):
        if rng.random() < 0.25 and len(kept.requests) < 30:
            made += 1
            prompt, out_len = int(rng.choice([16, 64, 200, 700])), int(rng.integers(1, 60))
            for s in (kept, plain):
                s.add_request(K.request(f"r{made}", prompt, out_len))
        if k % 37 == 36 and kept.running:  # an abort from the API server
            rid = kept.running[int(rng.integers(len(kept.running)))].request_id
            for s in (kept, plain):
                s.finish_requests(rid, RequestStatus.FINISHED_ABORTED)
            aborted += 1
        assert kept._sw_kv.total(kept.running) == sum(r.num_computed_tokens for r in kept.running)
        checked += 1
        gap, step = float(rng.uniform(0, 1)), float(rng.uniform(1.0, 5.0))
        for clock in clocks:
            clock.advance_ms(gap)
        a, b = kept.schedule(), plain.schedule()
        assert a.num_scheduled_tokens == b.num_scheduled_tokens
        preempted += len(a.preempted_req_ids or ())
        if a.total_num_scheduled_tokens:
            assert same(row(kept, a), row(plain, b))
        now = [(a, K.runner_output(kept, a)), (b, K.runner_output(plain, b))]
        for clock in clocks:
            clock.advance_ms(step)
        if async_scheduling:  # the step before this one completes now
            pending, now = now, pending
        for s, done in zip((kept, plain), now, strict=False):
            s.update_from_output(*done)
    assert made > 80 and aborted > 5 and preempted > 0 and checked == 500
    assert kept._sw_kv.recounts < checked / 3  # the kept sum answered most steps
    assert plain._sw_kv.recounts == checked
    for s in (kept, plain):
        s.shutdown()
