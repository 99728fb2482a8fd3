"""`servecal import aiconfigurator` composing MoE layers (Mixtral-8x7B on H100, vLLM 0.24)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from servecal.profiler.design import Grid
from servecal.profiler.importers import import_profile
from servecal.profiler.importers.collective import CommOptions
from servecal.profiler.importers.interp import Series
from servecal.profiler.shapes import SHAPES
from servecal.util.errors import InputError

SLICE = (
    Path(__file__).parents[2] / "sched" / "data" / "aiconfigurator_h100_sxm_vllm0.24_mixtral-8x7b"
)
MIXTRAL = SHAPES["mixtral-8x7b"]
GRID = Grid(n_decode=(0, 1, 16, 64), chunk=(0, 512), ctx=(255, 1023), prefix=(0,))


def _import(ep: int, skew: float = 0.0) -> tuple[pd.DataFrame, dict]:
    shape = replace(MIXTRAL, ep=ep, routing_skew=skew)
    return import_profile("aiconfigurator", SLICE, shape, 1, GRID, CommOptions())


def test_ep1_has_no_all_to_all_and_ep8_prices_deepeps():
    ep1, prov1 = _import(1)
    ep8, prov8 = _import(8)
    assert (ep1["op_a2a_ms"] == 0).all()
    assert (ep8.loc[(ep8.n_decode + ep8.chunk) > 0, "op_a2a_ms"] > 0).all()
    assert prov1["moe"] == "E8 top-2 ffn 14336 EP 1" and "EP 1" in prov1["moe_all_to_all"]
    # by hand: 16 decode tokens at EP 8, top-2 of 8 experts, profiled hidden 4096 top-6:
    # 16 x (2/6) equivalent tokens through DeepEP's low-latency dispatch + combine, per layer
    a2a = pd.read_csv(next(SLICE.glob("*moe_a2a*")))
    ll = a2a[(a2a.comm_backend == "deepep_ll") & (a2a.hidden_size == 4096) & (a2a.topk == 6)]
    one = sum(
        Series.from_pairs(p.num_tokens, p.latency).at(16 * 2 / 6) / 1000
        for _, p in ll.groupby("phase")
    )
    row = ep8[(ep8.n_decode == 16) & (ep8.chunk == 0) & (ep8.ctx == 255)].iloc[0]
    assert row.op_a2a_ms == pytest.approx(MIXTRAL.n_layers * one, rel=1e-9)
    assert 0.05 < row.op_a2a_ms / row.ms < 0.6  # a real share of a decode step


def test_expert_parallelism_shrinks_the_experts_of_a_rank():
    ep1, _ = _import(1)
    ep8, _ = _import(8)
    sel = (ep1.n_decode == 64) & (ep1.chunk == 0)
    assert (ep8.loc[sel, "op_linear_ms"].to_numpy() < ep1.loc[sel, "op_linear_ms"].to_numpy()).all()


def test_routing_skew_reads_the_power_law_rows():
    balanced, _ = _import(1)
    skewed, prov = _import(1, skew=1.2)
    # an uneven load slows the busiest expert: the 64-token steps and the chunks (a
    # single token reads within the profile's noise either way)
    big = (skewed.n_decode + skewed.chunk) >= 64
    assert (skewed.loc[big, "op_linear_ms"] > balanced.loc[big, "op_linear_ms"]).all()
    assert "power law 1.2" in prov["moe_experts"]


def test_a_moe_shape_the_tables_lack_is_one_error():
    with pytest.raises(InputError, match="no balanced moe rows"):
        import_profile("aiconfigurator", SLICE, replace(MIXTRAL, top_k=4), 1, GRID, CommOptions())


def test_dense_imports_have_no_all_to_all_column():
    frame, prov = import_profile(
        "aiconfigurator", SLICE, replace(MIXTRAL, experts=0, top_k=0, expert_intermediate=0),
        1, GRID, CommOptions(),
    )  # fmt: skip
    assert "op_a2a_ms" not in frame.columns and "moe" not in prov
