"""The vLLM plug-in's plain-Python parts, without vLLM: settings, table checks, planner."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from servecal.costmodels.table import CostTable
from servecal.integrations.vllm.config import PluginConfigError, load_config
from servecal.integrations.vllm.planner import StepState, plan_step
from servecal.integrations.vllm.tables import check_model, load_table, served_shape
from servecal.sched.policies.sloweave import SLOWeaveConfig, deadline_chunk

sys.path.insert(0, str(Path(__file__).parents[1] / "costmodels"))
from tablefactory import small_table  # noqa: E402

TINY_SHAPE = {
    "name": "tiny",
    "n_layers": 4,
    "hidden": 128,
    "n_heads": 4,
    "n_kv_heads": 2,
    "head_dim": 32,
    "intermediate": 384,
    "vocab": 2048,
}


class HFConfig:
    """The attributes of a Hugging Face LlamaConfig that the check reads."""

    num_hidden_layers = 4
    hidden_size = 128
    num_attention_heads = 4
    num_key_value_heads = 2
    head_dim = 32
    intermediate_size = 384
    vocab_size = 2048


@pytest.fixture()
def table_path(tmp_path: Path) -> Path:
    path = tmp_path / "table.json"
    small_table(fingerprint={"model_shape": TINY_SHAPE, "dtype": "float32"}).save(path)
    return path


# -- settings -------------------------------------------------------------------------
def test_config_from_additional_config(table_path: Path) -> None:
    cfg = load_config(
        {"servecal": {"table": str(table_path), "tpot_slo_ms": 25, "run_dir": "/tmp/r"}}, {}
    )
    assert cfg.table == table_path and cfg.tpot_slo_ms == 25.0
    assert cfg.run_dir == Path("/tmp/r") and cfg.quantile == 0.99 and cfg.use_margin


def test_environment_is_the_fallback_and_the_section_wins(table_path: Path) -> None:
    env = {"SERVECAL_TABLE": str(table_path), "SERVECAL_TPOT_SLO_MS": "40",
           "SERVECAL_RUN_DIR": "/srv/run"}  # fmt: skip
    cfg = load_config({}, env)
    assert (cfg.table, cfg.tpot_slo_ms, cfg.run_dir) == (table_path, 40.0, Path("/srv/run"))
    assert load_config({"servecal": {"tpot_slo_ms": 10}}, env).tpot_slo_ms == 10.0


@pytest.mark.parametrize(
    ("section", "env", "message"),
    [
        ({"tpot_slo_ms": 25}, {}, "no 'table' given: set \"table\" in --additional-config"),
        ({"table": "t.json"}, {}, "SERVECAL_TPOT_SLO_MS"),
        ({"table": "t.json", "tpot_slo_ms": 25, "tpot": 3}, {}, "unknown key 'tpot'"),
        ({"table": "t.json", "tpot_slo_ms": "fast"}, {}, "'tpot_slo_ms' from --additional-config"),
        ({"table": "t.json", "tpot_slo_ms": -1}, {}, "'tpot_slo_ms' must be a number > 0"),
        ({"table": "t.json"}, {"SERVECAL_TPOT_SLO_MS": "x"}, "SERVECAL_TPOT_SLO_MS='x'"),
        ({"table": "t.json", "tpot_slo_ms": 5, "use_margin": 1}, {}, "must be bool"),
    ],
)
def test_bad_settings_are_one_line(section: dict, env: dict, message: str) -> None:
    with pytest.raises(PluginConfigError) as err:
        load_config({"servecal": section}, env)
    text = str(err.value)
    assert text.startswith("servecal: ") and "\n" not in text
    assert message in text


def test_a_used_run_folder_is_never_overwritten(table_path: Path, tmp_path: Path) -> None:
    used = tmp_path / "runs"
    used.mkdir()
    (used / "run.json").write_text("{}")
    section = {"table": str(table_path), "tpot_slo_ms": 25, "run_dir": str(used)}
    with pytest.raises(PluginConfigError, match="exists and is not empty"):
        load_config({"servecal": section}, {})
    (tmp_path / "empty").mkdir()
    assert load_config({"servecal": {**section, "run_dir": str(tmp_path / "empty")}}, {})


def test_additional_config_that_is_not_a_mapping_means_no_section(table_path: Path) -> None:
    env = {"SERVECAL_TABLE": str(table_path), "SERVECAL_TPOT_SLO_MS": "25"}
    assert load_config(object(), env).tpot_slo_ms == 25.0  # type: ignore[arg-type]


# -- the table --------------------------------------------------------------------------
def test_table_loads_and_matches_the_served_model(table_path: Path) -> None:
    table = load_table(table_path, 0.99, True)
    assert check_model(table, table_path, HFConfig(), "float32", "tiny") is None


def test_missing_table(tmp_path: Path) -> None:
    with pytest.raises(PluginConfigError, match=r"cost table .*nope.json: no such file"):
        load_table(tmp_path / "nope.json", 0.99, True)


def test_unknown_table_field_is_refused(table_path: Path) -> None:
    doc = json.loads(table_path.read_text())
    doc["qps_limit"] = 3
    table_path.write_text(json.dumps(doc))
    with pytest.raises(PluginConfigError, match="unknown field 'qps_limit'"):
        load_table(table_path, 0.99, True)


def test_damaged_table_is_one_line(table_path: Path) -> None:
    doc = json.loads(table_path.read_text())
    doc["quantiles"]["0.5"] = doc["quantiles"]["0.5"][:-1]
    table_path.write_text(json.dumps(doc))
    with pytest.raises(PluginConfigError, match="quantile 0.5"):
        load_table(table_path, 0.99, True)


def test_median_only_table_cannot_plan_with_a_margin(tmp_path: Path) -> None:
    t = small_table()
    only = CostTable(axes=t.axes, quantiles={0.5: t.values(0.5)}, fingerprint={})
    only.save(tmp_path / "p50.json")
    with pytest.raises(PluginConfigError, match="no quantile 0.99"):
        load_table(tmp_path / "p50.json", 0.99, True)
    with pytest.raises(PluginConfigError, match="no calibrated margin"):
        load_table(tmp_path / "p50.json", 0.5, True)
    assert load_table(tmp_path / "p50.json", 0.5, False).quantiles == (0.5,)


def test_table_for_another_model_is_refused(table_path: Path) -> None:
    table = load_table(table_path, 0.99, True)

    class Llama8B(HFConfig):
        num_hidden_layers = 32
        hidden_size = 4096

    with pytest.raises(PluginConfigError) as err:
        check_model(table, table_path, Llama8B(), "float32", "meta-llama/Llama-3-8B")
    assert "n_layers: table 4, served 32" in str(err.value)
    assert "hidden: table 128, served 4096" in str(err.value)
    with pytest.raises(PluginConfigError, match="dtype: table float32, served bfloat16"):
        check_model(table, table_path, HFConfig(), "bfloat16", "tiny")


def test_table_without_a_model_shape_warns(tmp_path: Path) -> None:
    small_table(fingerprint={"device_name": "x"}).save(tmp_path / "t.json")
    table = load_table(tmp_path / "t.json", 0.99, True)
    warning = check_model(table, tmp_path / "t.json", HFConfig(), None, "m")
    assert "records no model shape" in warning


def test_served_shape_fills_head_dim_and_kv_heads() -> None:
    class MHA:
        num_hidden_layers, hidden_size, num_attention_heads = 2, 256, 8
        intermediate_size, vocab_size = 512, 100

    shape = served_shape(MHA())
    assert shape["head_dim"] == 32 and shape["n_kv_heads"] == 8


# -- the planner ------------------------------------------------------------------------
TABLE = small_table()
CFG = SLOWeaveConfig(c_max=4096)


def state(n: int, budget_ms: float, remaining: int = 3000, cap: int = 8192, ctx: float = 512.0,
          prefix: int = 0) -> StepState:  # fmt: skip
    return StepState(100.0, n, n, ctx, 100.0 + budget_ms, prefix, remaining, cap)


def test_few_decodes_get_a_large_chunk_many_a_small_one() -> None:
    few = plan_step(state(2, 8.0), TABLE, CFG)
    many = plan_step(state(32, 8.0), TABLE, CFG)
    assert few.chunk > many.chunk > 0
    assert few.token_budget == 2 + few.chunk and many.token_budget == 32 + many.chunk
    # the chunk is the largest whose P99 + margin fits
    for n, plan in ((2, few), (32, many)):
        assert (
            TABLE.predict(n, plan.chunk, 512.0, 0, q=0.99) + TABLE.margin(n, plan.chunk, 512.0, 0)
            <= 8.0
        )
        assert (
            TABLE.predict(n, plan.chunk + 1, 512.0, 0, q=0.99)
            + TABLE.margin(n, plan.chunk + 1, 512.0, 0)
            > 8.0
        )


def test_a_passed_deadline_leaves_only_the_decodes() -> None:
    plan = plan_step(state(8, -3.0), TABLE, CFG)
    assert plan.chunk == 0 and plan.token_budget == 8 and plan.budget_ms == 0.0


def test_no_decode_no_deadline_the_whole_prompt_up_to_the_cap() -> None:
    assert plan_step(state(0, math.inf, remaining=500), TABLE, CFG).chunk == 500
    capped = plan_step(state(0, math.inf, remaining=9000, cap=2048), TABLE, CFG)
    assert capped.chunk == 2048 and capped.token_budget == 2048


def test_budget_never_exceeds_the_cap() -> None:
    plan = plan_step(state(100, 1e9, remaining=9000, cap=2048), TABLE, CFG)
    assert plan.chunk == 2048 - 100 and plan.token_budget == 2048


def test_no_prompt_waiting_leaves_vllm_alone() -> None:
    plan = plan_step(state(8, 8.0, remaining=0), TABLE, CFG)
    assert plan.chunk == 0 and plan.token_budget is None


def test_planner_decides_through_the_engine_policys_function() -> None:
    for n, budget in ((1, 3.0), (8, 6.0), (32, 9.5)):
        s = state(n, budget)
        expect, _, _ = deadline_chunk(TABLE, CFG, n, s.ctx, 0, 3000, s.now_ms,
                                      s.earliest_deadline_ms, 0.0)  # fmt: skip
        assert plan_step(s, TABLE, CFG).chunk == expect


def test_importing_servecal_does_not_import_vllm() -> None:
    code = (
        "import sys, servecal.integrations.vllm, servecal.integrations.vllm.runlog, "
        "servecal.integrations.vllm.planner, servecal.cli; "
        "print('vllm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
