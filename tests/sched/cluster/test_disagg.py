"""Disaggregated prefill and decode: the transfer formula, conservation, decode-only TPOT."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servecal.costmodels import InputError
from servecal.sched.cluster import ReplicaSpec
from servecal.sched.cluster.disagg import DisaggSpec
from servecal.sched.cluster.kv_transfer import LINKS, MODELS, KVShape, Link, link, transfer_ms
from servecal.sched.experiment import run, summarize
from servecal.sched.policies.registry import PolicySpec


def _disagg(p: int, d: int, via: str = "infinite", policy: str = "fcfs-chunk-512", **kw):
    prefill = tuple(ReplicaSpec(PolicySpec(policy)) for _ in range(p))
    decode = tuple(ReplicaSpec(PolicySpec("fixed-512")) for _ in range(d))
    kw.setdefault("rate", 20.0)
    kw.setdefault("decode_router", PolicySpec("least-requests"))
    return DisaggSpec("mixed", prefill, decode, link=LINKS[via], tpot_slo_ms=25,
                      n_requests=300, **kw)  # fmt: skip


def test_transfer_time_is_the_formula_for_llama_3_8b_over_infiniband_ndr():
    shape = MODELS["llama-3-8b"]
    assert shape.bytes_per_token == 32 * 2 * 8 * 128 * 2 == 131_072  # 128 KiB per token
    ndr = LINKS["ib-ndr"]
    assert (ndr.gbytes_per_s, ndr.latency_ms) == (50.0, 0.02)
    # 1,000 tokens: 131,072,000 bytes at 50e9 B/s = 2.62144 ms, plus 0.02 ms
    assert transfer_ms(shape, ndr, 1000) == pytest.approx(2.64144, rel=1e-12)
    # layer-wise overlap leaves the last of 32 layers to send
    assert transfer_ms(shape, ndr, 1000, layerwise=True) == pytest.approx(
        2.62144 / 32 + 0.02, rel=1e-12
    )
    own = KVShape(layers=4, kv_heads=2, head_dim=64, bytes_per_element=1)
    assert transfer_ms(own, Link("x", 1.0, 1.5), 10) == pytest.approx(
        4 * 2 * 2 * 64 * 10 / 1e9 * 1e3 + 1.5
    )
    assert transfer_ms(shape, LINKS["infinite"], 10**6) == 0.0


def test_links_and_models_read_from_a_plan_and_bad_ones_are_one_line():
    assert link("roce-100g").gbytes_per_s == 12.5
    assert link({"name": "mine", "gbytes_per_s": 25, "latency_ms": 0.5}) == Link("mine", 25, 0.5)
    assert link({"name": "nvlink", "latency_ms": 0.1}) == Link("nvlink", 450.0, 0.1)
    for bad in ("token-ring", {"name": "x", "gbytes_per_s": 0}, {"name": "x", "speed": 1}, 3):
        with pytest.raises(InputError):
            link(bad)


def test_one_prefill_one_decode_on_an_infinite_link_conserves_requests_and_tokens():
    spec = _disagg(1, 1)
    result = run(spec, 0)
    req, it = result.request_columns, result.iteration_columns
    assert sorted(req["rid"].tolist()) == list(range(300))  # every request, once
    assert not req["rejected"].any()
    assert np.isfinite(req["completion_ms"]).all()
    assert (req["tokens_out"] == req["output_tokens"]).all()
    prefill = it["replica"] == 0
    # every prompt token prefilled once (no recompute), never on the decode replica
    assert int(it["chunk"][prefill].sum()) == int(req["prompt_tokens"].sum())
    assert int(req["recomputes"].sum()) == 0
    assert (it["chunk"][~prefill] == 0).all()
    # the prefill computes token 1; the decode replica emits the rest, 2 with its first
    decodes = np.maximum(1, req["output_tokens"] - 1)
    assert int(it["n_decode"][~prefill].sum()) == int(decodes.sum())
    assert (it["n_decode"][prefill] == 0).all()
    # no transfer time: each KV lands when its prefill ends; TTFT = that + a decode
    assert (req["kv_transfer_ms"] == 0).all()
    assert (req["first_token_ms"] > req["prefill_done_ms"]).all()
    assert summarize(spec, result)["attainment"] > 0.9


def test_tpot_on_a_decode_only_replica_never_includes_a_prefill():
    result = run(_disagg(1, 2, via="ib-ndr", rate=30.0), 1)
    req, it = result.request_columns, result.iteration_columns
    decode = it["replica"] >= 1
    assert (it["chunk"][decode] == 0).all()
    # every gap a request saw is one of its decode replica's iterations (which carry no
    # chunk), never a prefill iteration's duration
    for rid, k, worst, o in zip(req["rid"], req["decode_replica"], req["tpot_max_ms"],
                                req["output_tokens"], strict=True):  # fmt: skip
        if o > 2:
            own = it["duration_ms"][it["replica"] == 1 + k]
            assert worst in own, rid
            assert worst not in it["duration_ms"][~decode], rid
    assert set(req["decode_replica"].tolist()) == {0, 1}


def test_a_slow_link_delays_the_first_token_by_its_transfer():
    fast = run(_disagg(1, 1, via="infinite"), 0).request_columns
    slow = run(_disagg(1, 1, via="roce-100g"), 0).request_columns
    assert np.array_equal(fast["prefill_done_ms"], slow["prefill_done_ms"])
    expected = [transfer_ms(MODELS["llama-3-8b"], LINKS["roce-100g"], p)
                for p in slow["prompt_tokens"]]  # fmt: skip
    assert np.allclose(slow["kv_transfer_ms"], expected)
    lag = slow["first_token_ms"] - slow["prefill_done_ms"]
    assert (lag >= slow["kv_transfer_ms"] - 1e-9).all()


def test_flowprefill_prefill_pool_runs_routed_up_front():
    result = run(_disagg(2, 1, policy="flowprefill", prefill_router=PolicySpec("round-robin")), 0)
    assert np.isfinite(result.request_columns["completion_ms"]).mean() > 0.99
    with pytest.raises(ValueError, match="routed up front"):
        run(_disagg(2, 1, policy="flowprefill", prefill_router=PolicySpec("least-requests")), 0)


def test_decode_admission_holds_the_kv_capacity():
    decode = (ReplicaSpec(PolicySpec("fixed-512"), kv_capacity=6000),)
    prefill = (ReplicaSpec(PolicySpec("fcfs-chunk-512")),)
    spec = DisaggSpec("mixed", prefill, decode, link=LINKS["infinite"], tpot_slo_ms=25,
                      rate=40.0, n_requests=200)  # fmt: skip
    result = run(spec, 0)
    it = result.iteration_columns
    req = result.request_columns
    ok = ~req["rejected"]
    assert (
        req["prompt_tokens"][req["rejected"]] + req["output_tokens"][req["rejected"]] > 6000
    ).all()
    assert np.isfinite(req["completion_ms"][ok]).all()
    # the KV the running requests hold never passes the capacity
    decode_ctx = it["ctx"][it["replica"] == 1] * it["n_decode"][it["replica"] == 1]
    assert decode_ctx.max() <= 6000 and math.isfinite(decode_ctx.max())


def test_the_table_flags_reach_the_pools_loaders_but_not_the_runs_config():
    from servecal.costmodels.provenance import TableTrust

    trusting = _disagg(1, 1, rate=10.0, trust=TableTrust(allow_mismatch=True))
    assert trusting == _disagg(1, 1, rate=10.0)  # the flags are not the question
    assert "trust" not in trusting.describe()
    assert trusting.trust.allow_mismatch
