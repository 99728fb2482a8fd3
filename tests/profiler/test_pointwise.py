"""Pointwise kernels priced by the importers: bytes over bandwidth plus a launch cost."""

from pathlib import Path

import pandas as pd
import pytest

from servecal.profiler.design import Grid
from servecal.profiler.importers import import_profile
from servecal.profiler.importers.pointwise import (
    BANDWIDTH_GBPS,
    LAUNCH_MS,
    PointwiseModel,
    device_key,
)
from servecal.profiler.shapes import ModelShape
from servecal.util.errors import InputError

DATA = Path(__file__).parents[1] / "data" / "profiler"
AIC = DATA / "aiconfigurator"
SHAPE = ModelShape("on-grid", 2, 4096, 32, 8, 128, 8192, 16384)


def test_launch_cost_is_the_median_of_vidurs_one_token_op_times():
    rows = pd.read_csv(DATA / "vidur_pointwise_1token.csv")
    assert len(rows) == 45 and set(rows.tp) == {1, 2, 4}
    assert rows.median_ms.median() == pytest.approx(LAUNCH_MS)


def test_layer_price_is_five_launches_plus_bytes_over_bandwidth_by_hand():
    model = PointwiseModel(SHAPE, 2, "a100-pcie-80gb")
    # per token at TP 2: norms 2*4*4096, rotary 2*(16+4)*128, KV write 4*4*128,
    # activation 3*8192/2 values, 2 bytes each
    values = 2 * 4 * 4096 + 2 * 20 * 128 + 4 * 4 * 128 + 3 * 4096
    assert model.values_per_token() == values
    assert model.layer_ms(1000) == pytest.approx(5 * LAUNCH_MS + 1000 * values * 2 / 1935e6)
    h100 = PointwiseModel(SHAPE, 2, "h100-sxm")
    assert h100.layer_ms(8192) < model.layer_ms(8192)  # more bandwidth, less time
    assert h100.layer_ms(1) == pytest.approx(model.layer_ms(1), rel=0.01)  # launch-bound


def test_device_names_map_to_datasheet_bandwidths():
    assert device_key("NVIDIA A100-SXM4-80GB") == "a100-sxm-80gb"
    assert device_key("NVIDIA A100 80GB PCIe") == "a100-pcie-80gb"
    assert device_key("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert BANDWIDTH_GBPS[device_key("h100-sxm")] == 3350.0
    with pytest.raises(InputError, match="no memory bandwidth known for device 'TPU v5'"):
        device_key("TPU v5")


def test_aiconfigurator_rows_carry_the_pointwise_kernels_and_say_so():
    grid = Grid(n_decode=(0, 8), chunk=(0, 512), ctx=(1023,), prefix=(0,))
    priced, prov = import_profile("aiconfigurator", AIC, SHAPE, 1, grid)
    bare, bare_prov = import_profile("aiconfigurator", AIC, SHAPE, 1, grid, pointwise=False)
    model = PointwiseModel(SHAPE, 1, "a100-sxm-80gb")
    for p, b in zip(priced.itertuples(), bare.itertuples(), strict=True):
        tokens = p.n_decode + p.chunk
        assert p.op_other_ms == pytest.approx(2 * model.layer_ms(tokens))
        assert p.ms == pytest.approx(b.ms + p.op_other_ms) and b.op_other_ms == 0
    assert prov["pointwise_bandwidth_gbps"] == 2039.0 and prov["pointwise_launch_ms"] == LAUNCH_MS
    assert "datasheet" in prov["pointwise_bandwidth_source"]
    assert "pointwise_device" not in bare_prov
    assert any("--no-pointwise" in a for a in bare_prov["approximations"])
    pcie, pcie_prov = import_profile(
        "aiconfigurator", AIC, SHAPE, 1, grid, pointwise_device="a100-pcie-80gb"
    )
    assert pcie_prov["pointwise_device"] == "a100-pcie-80gb"
    assert (pcie.op_other_ms >= priced.op_other_ms).all()


def test_the_default_import_grid_reaches_16k_chunks_and_prices_them_above_4k():
    from servecal.profiler.design import GPU_GRID, IMPORT_GRID

    assert max(IMPORT_GRID.chunk) == 16384 and max(GPU_GRID.chunk) == 4096
    grid = Grid(n_decode=(0,), chunk=(4096, 8192, 16384), ctx=(128,), prefix=(0, 4096))
    frame, prov = import_profile("aiconfigurator", AIC, SHAPE, 1, grid)
    ms = frame.set_index(["chunk", "prefix"]).ms
    assert ms[4096, 0] < ms[8192, 0] < ms[16384, 0]
    # beyond the profiled 16,384-token prompt, prefill attention grows as the length squared
    attn = frame.set_index(["chunk", "prefix"]).op_attn_prefill_ms
    length = (16384**2 + 2 * 16384 * 4096) ** 0.5
    assert attn[16384, 4096] == pytest.approx(attn[16384, 0] * (length / 16384) ** 2)
    assert prov["extrapolated_reads"] > 0


def test_a_step_with_several_prefills_prices_attention_per_prompt():
    from servecal.profiler.design import Point
    from servecal.profiler.importers.aiconfigurator import AiConfiguratorSource
    from servecal.profiler.importers.compose import StepComposition, compose_row, compose_step
    from servecal.profiler.importers.interp import ExtrapolationLog

    source = AiConfiguratorSource(AIC, SHAPE, 1, ExtrapolationLog())
    one = compose_row(source, SHAPE, Point(8, 1024, 1023, 0))
    same = compose_step(source, SHAPE, 8, 1023, [(1024, 0)])
    assert same["ms"] == pytest.approx(one["ms"])
    four = compose_step(source, SHAPE, 8, 1023, [(256, 0)] * 4)
    assert four["op_linear_ms"] == pytest.approx(one["op_linear_ms"])  # same 1,032 tokens
    quarter = compose_row(source, SHAPE, Point(0, 256, 128, 0))["op_attn_prefill_ms"]
    # one varlen kernel over the decodes and the four prompts: four kernels' fixed cost saved
    saved = 4 * SHAPE.n_layers * source.attention_launch_ms()
    assert saved > 0
    assert four["op_attn_prefill_ms"] == pytest.approx(4 * quarter - saved)
    eager = compose_step(source, SHAPE, 8, 1023, [(256, 0)] * 4, StepComposition("separate"))
    assert eager["op_attn_prefill_ms"] == pytest.approx(4 * quarter)  # a kernel per prompt
    assert four["op_attn_prefill_ms"] < one["op_attn_prefill_ms"]
    assert four["op_head_ms"] > one["op_head_ms"]  # a sampled row per prompt
