"""Mixture-of-experts shapes: the routing plan, the MoE block, EP's all-to-all, skew."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from servecal.cli import app
from servecal.profiler.kv import IterationBatch, KVPool, PrefillSegment
from servecal.profiler.model import build_model
from servecal.profiler.moe import (
    MoEMLP,
    all_to_all_rows,
    moe_work,
    tokens_per_expert,
)
from servecal.profiler.shapes import SHAPES, ModelShape
from servecal.util.errors import InputError

MOE = SHAPES["tiny-moe"]


def _forward_rows(shape: ModelShape, tokens: int) -> tuple[int, int]:
    block = MoEMLP(shape)
    for p in block.parameters():
        torch.nn.init.normal_(p, 0.0, 0.02)
    with torch.inference_mode():
        out = block(torch.randn(tokens, shape.hidden))
    assert out.shape == (tokens, shape.hidden)
    return block.last_rows, block.last_a2a_rows


def test_doubling_top_k_doubles_the_routed_ffn_work():
    k2 = replace(MOE, top_k=2, shared_experts=0)
    k4 = replace(MOE, top_k=4, shared_experts=0)
    for tokens in (1, 7, 64, 300):
        assert moe_work(k4, tokens).ffn_flops == 2 * moe_work(k2, tokens).ffn_flops
    assert _forward_rows(k4, 64)[0] == 2 * _forward_rows(k2, 64)[0] == 2 * 64 * 2
    # with a shared expert the FFN part still rises, by less than 2x
    with_shared = moe_work(replace(k4, shared_experts=1), 64).ffn_flops
    assert with_shared > moe_work(replace(k2, shared_experts=1), 64).ffn_flops


def test_expert_parallelism_adds_an_all_to_all():
    ep1, ep2 = MOE, replace(MOE, ep=2)
    assert moe_work(ep1, 64).a2a_bytes == 0 and all_to_all_rows(ep1, 64) == 0
    assert moe_work(ep2, 64).a2a_bytes > 0
    # uniform routing: half the assignments leave the rank, half its experts' rows stay
    assert all_to_all_rows(ep2, 64) == 64 * 2 // 2
    rows1, a2a1 = _forward_rows(ep1, 64)
    rows2, a2a2 = _forward_rows(ep2, 64)
    assert a2a1 == 0 and a2a2 == 64
    assert rows2 == rows1 // 2


def test_routing_skew_loads_the_busiest_rank_more():
    uniform = tokens_per_expert(MOE, 100)
    assert uniform.sum() == 200 and uniform.max() - uniform.min() <= 1
    skewed = tokens_per_expert(replace(MOE, routing_skew=1.5), 100)
    assert skewed.sum() == 200 and skewed.max() <= 100  # a token picks an expert once
    assert skewed[0] > uniform[0]
    ep2 = replace(MOE, ep=2)
    assert moe_work(replace(ep2, routing_skew=1.5), 100).ffn_flops > moe_work(ep2, 100).ffn_flops
    steep = tokens_per_expert(replace(MOE, routing_skew=8.0), 10)
    assert steep.sum() == 20 and steep.max() == 10


def test_dense_shapes_keep_their_dict_and_hash():
    tiny = SHAPES["tiny"]
    assert tiny.hash == "911474fc1d683654"  # as before MoE fields existed
    assert "experts" not in tiny.to_dict() and tiny.moe_label is None
    assert MOE.to_dict()["experts"] == 8 and MOE.hash != tiny.hash
    assert MOE.moe_label == "E8 top-2 ffn 192 shared 1 EP 1"


def test_moe_fields_are_checked(tmp_path):
    for bad in ({"top_k": 9}, {"ep": 3}, {"routing_skew": -1.0}, {"expert_intermediate": 0}):
        with pytest.raises(ValueError):
            replace(MOE, **bad)
    with pytest.raises(ValueError):
        replace(SHAPES["tiny"], top_k=2)  # MoE fields need experts
    path = tmp_path / "m.json"
    path.write_text(
        '{"n_layers": 2, "hidden": 64, "n_heads": 4, "n_kv_heads": 2, "head_dim": 16,'
        ' "intermediate": 128, "vocab": 97, "experts": 4, "top_k": 2,'
        ' "expert_intermediate": 32, "ep": 3}'
    )
    with pytest.raises(InputError):
        ModelShape.from_file(path)
    path.write_text(path.read_text().replace('"ep": 3', '"ep": 2'))
    assert ModelShape.from_file(path).moe_label == "E4 top-2 ffn 32 EP 2"


def test_the_moe_transformer_runs_an_iteration():
    model = build_model(MOE, "cpu", torch.float64, seed=1)
    kv = KVPool(MOE, MOE.n_layers, 1, 16, "cpu", torch.float64)
    batch = IterationBatch(prefills=[PrefillSegment(kv, 0, 0, 5)])
    with torch.inference_mode():
        logits = model(torch.tensor([5, 17, 3, 88, 42]), batch)
    assert logits.shape == (1, MOE.vocab) and bool(torch.isfinite(logits).all())
    assert model.layers[0].moe is not None and model.layers[0].moe.last_rows == 5 * 2
    assert np.isfinite(float(logits.sum()))


def test_calibrate_tiny_moe_writes_a_table_naming_the_moe_shape(tmp_path):
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"n_decode": [0, 1, 4], "chunk": [0, 8, 32], "ctx": [16, 64],
                                "prefix": [0, 32]}))  # fmt: skip
    out = tmp_path / "moe"
    args = ["calibrate", "--device", "cpu", "--model", "tiny-moe", "--grid", str(grid)]
    result = CliRunner().invoke(app, [*args, "--budget", "0.01", "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = json.loads((out / "costtable.json").read_text())
    fingerprint = table["fingerprint"]
    assert fingerprint["model"] == "tiny-moe"
    assert fingerprint["moe"] == "E8 top-2 ffn 192 shared 1 EP 1"
    assert fingerprint["model_shape"]["experts"] == 8
