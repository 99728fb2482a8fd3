"""One KV budget for the engine, the cluster, Sorted-F and the prefix cache (issue 46, part 2):
``M`` from memory over the bytes a token of the table's KV dtype takes, so an fp8 KV table
doubles Sorted-F's cap and the prefix cache's room against bf16 in the same memory."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from enginekit import req
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels import AnalyticPredictor
from servecal.costmodels.table import CostTable
from servecal.profiler.kvbudget import KVBudget, kv_tokens
from servecal.profiler.shapes import ModelShape
from servecal.sched.engine import Engine, EngineConfig
from servecal.sched.policies import FixedChunk
from servecal.sched.prefix_cache import PrefixCacheConfig
from servecal.sched.sortedf.online import SortedFOnline
from servecal.sched.truth import AnalyticTruth
from servecal.util.errors import InputError

DATA = Path(__file__).resolve().parents[2] / "sched" / "data"
TABLES = {d: DATA / f"imported_h100x1_vllm0.24_{d}" / "table.json" for d in ("bf16", "fp8")}
SHAPE = ModelShape.from_name("llama-3-8b")
MEMORY_GB = 0.5  # small, so the budget binds: 3,814 tokens of bf16 KV, 7,629 of fp8
B = 512


def budget(dtype: str, memory_gb: float = MEMORY_GB) -> KVBudget:
    table = CostTable.load(TABLES[dtype])
    return KVBudget.of_table(memory_gb, table.fingerprint, str(TABLES[dtype]))


def test_the_budget_of_a_table_is_memory_over_its_kv_bytes_per_token():
    bf16, fp8 = budget("bf16", 40), budget("fp8", 40)
    assert (bf16.shape.name, bf16.kv_dtype, bf16.tp) == ("llama-3-8b", "bfloat16", 1)
    assert bf16.tokens == kv_tokens(SHAPE, 40, "bfloat16") == 305_175
    assert fp8.tokens == kv_tokens(SHAPE, 40, "fp8") == 610_351
    assert EngineConfig.from_budget(fp8).kv_capacity == 610_351
    # a table that records no model (the simulated device's) cannot say its bytes per token
    fitted = CostTable.load(DATA / "device_a100_fitted.json")
    with pytest.raises(InputError, match="records no model shape"):
        KVBudget.of_table(40, fitted.fingerprint, "fitted")


class WatchedSortedF(SortedFOnline):
    """Sorted-F-Online, remembering the cap ``M`` it formed its batches on."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.caps: set[int] = set()

    def _replan(self, waiting, memory: int) -> None:
        self.caps.add(memory)
        super()._replan(waiting, memory)


def sorted_f_run(dtype: str) -> tuple[set[int], int]:
    """Sorted-F's caps and the most requests it ran at once: 12 requests of 1,000 prompt
    and 200 output tokens (1,199 KV tokens each at their end), all at time 0."""
    policy = WatchedSortedF()
    requests = [req(i, 0.0, prompt=1000, out=200) for i in range(12)]
    engine = Engine(requests, policy, AnalyticPredictor(),
                    AnalyticTruth().executor(np.random.default_rng(0)),
                    EngineConfig.from_budget(budget(dtype)))  # fmt: skip
    result = engine.run()
    its = result.iterations
    running = (its["n_decode"] + its["n_prefills"]).max()
    assert result.requests["completion_ms"].notna().all()
    return policy.caps, int(running)


def test_sorted_f_caps_on_the_engines_budget_and_fp8_doubles_it():
    caps16, most16 = sorted_f_run("bf16")
    caps8, most8 = sorted_f_run("fp8")
    assert caps16 == {budget("bf16").tokens} == {3_814}
    assert caps8 == {budget("fp8").tokens} == {7_629}  # 2 x 3,814.7, to the token
    # the cap binds: 3 requests of 1,199 tokens fit in bf16, 6 in fp8
    assert most16 == 3 and most8 == 6


def cached_tokens_after(dtype: str) -> int:
    """Twenty distinct 1,024-token prompts (two 512-token blocks each), one at a time:
    what the prefix cache keeps of them at the end is the room the budget leaves."""
    requests = [replace(req(i, 1000.0 * i, prompt=2 * B, out=1), block_ids=(2 * i, 2 * i + 1),
                        block_size=B) for i in range(20)]  # fmt: skip
    config = EngineConfig.from_budget(budget(dtype), prefix_cache=PrefixCacheConfig(B))
    engine = Engine(requests, FixedChunk(4096), AnalyticPredictor(),
                    AnalyticTruth().executor(np.random.default_rng(0)), config)  # fmt: skip
    engine.run()
    return engine.prefix_cache.cached_tokens


def test_the_prefix_caches_room_is_the_budget_and_fp8_doubles_it():
    bf16, fp8 = cached_tokens_after("bf16"), cached_tokens_after("fp8")
    assert bf16 == (3_814 // B) * B == 3_584  # 7 whole blocks
    assert fp8 == (7_629 // B) * B == 7_168 == 2 * bf16  # 14


def test_simulate_takes_its_kv_capacity_from_memory_and_the_tables_kv_dtype(tmp_path):
    runner = CliRunner()
    base = ["simulate", "--workload", "chat", "--rate", "5", "--tpot-slo", "25", "--requests",
            "20", "--seeds", "1", "--policy", "fixed-512"]  # fmt: skip
    capacities = {}
    for dtype in ("bf16", "fp8"):
        out = tmp_path / dtype
        truth = f"samples:{TABLES[dtype].parent / 'samples.csv'}"
        args = [*base, "--truth", truth, "--predictor", str(TABLES[dtype]), "--kv-memory-gb",
                "40", "--out", str(out)]  # fmt: skip
        done = runner.invoke(app, args)
        assert done.exit_code == 0, done.output
        capacities[dtype] = _kv_capacity(out)
    assert capacities == {"bf16": 305_175, "fp8": 610_351}
    both = runner.invoke(app, [*base, "--kv-memory-gb", "40", "--kv-tokens", "9", "--out",
                               str(tmp_path / "x")])  # fmt: skip
    assert both.exit_code == 2 and "--kv-tokens or --kv-memory-gb" in both.output
    none = runner.invoke(app, [*base, "--kv-memory-gb", "40", "--out", str(tmp_path / "y")])
    assert none.exit_code == 2 and "needs a --predictor cost table" in none.output


def _kv_capacity(out: Path) -> int:
    import json

    run = json.loads((out / "seed-0" / "run.json").read_text())
    return _find(run, "kv_capacity")


def _find(doc, key):
    """The first ``key`` anywhere in ``doc`` (run.json keeps the spec a level down)."""
    if isinstance(doc, dict):
        if key in doc:
            return doc[key]
        for v in doc.values():
            hit = _find(v, key)
            if hit is not None:
                return hit
    return None
