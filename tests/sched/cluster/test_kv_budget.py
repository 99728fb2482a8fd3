"""KV capacity in tokens from memory and the KV cache's dtype (issue 46, part 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servecal.costmodels.provenance import NO_TRUST, FingerprintMismatchWarning, TableTrust
from servecal.profiler.kvbudget import kv_bytes_per_token, kv_tokens
from servecal.profiler.shapes import ModelShape
from servecal.sched.cluster.space import load_space
from servecal.util.errors import InputError

TRACE = Path(__file__).resolve().parents[3] / "sched" / "data" / "azure_conv_head4000.csv"
HEAD = (
    f'[workload]\ntrace = "{TRACE}"\nrequests = 300\nrate = 400\ntpot_slo_ms = 25\n'
    '[search]\nreplicas = [1, 6]\npolicies = ["fixed-512"]\nrouters = ["round-robin"]\n'
    '[[device]]\nname = "H100"\nprice_per_gpu_hour = 3.0\n'
)


def test_llama3_8b_bytes_per_token_by_hand_and_fp8_holds_twice_the_tokens():
    shape = ModelShape.from_name("llama-3-8b")
    # 32 layers x K and V x 8 KV heads x 128 x 2 bytes = 131,072 bytes a token in bf16
    assert kv_bytes_per_token(shape, "bfloat16") == 32 * 2 * 8 * 128 * 2 == 131_072
    assert kv_bytes_per_token(shape, "fp8") == 65_536
    bf16, fp8 = kv_tokens(shape, 40, "bfloat16"), kv_tokens(shape, 40, "fp8")
    assert bf16 == 40_000_000_000 // 131_072 == 305_175  # whole tokens: rounded down
    assert fp8 == 40_000_000_000 // 65_536 == 610_351  # twice, to the token (2 x 305,175.8)
    # at TP 2 each GPU holds half the KV heads: twice the tokens in the same memory per GPU
    assert kv_tokens(shape, 40, "bfloat16", tp=2) == fp8


def test_unknown_kv_dtypes_and_empty_budgets_are_refused():
    shape = ModelShape.from_name("llama-3-8b")
    with pytest.raises(InputError, match="kv_dtype 'int3'"):
        kv_tokens(shape, 40, "int3")
    with pytest.raises(InputError, match="kv_memory_gb"):
        kv_tokens(shape, 0, "fp8")


def entry(tmp_path: Path, body: str, trust: TableTrust = NO_TRUST):
    path = tmp_path / "plan.toml"
    path.write_text(HEAD + '[[device.tp]]\nsize = 1\nfleet = "A100x1"\n' + body)
    return load_space(path, trust)


def test_a_plan_entry_gives_its_kv_budget_as_memory_and_dtype(tmp_path: Path) -> None:
    bf16 = entry(tmp_path, 'kv_memory_gb = 40\nmodel = "llama-3-8b"\n').hardware[0]
    fp8_body = 'kv_memory_gb = 40\nmodel = "llama-3-8b"\nkv_dtype = "fp8"\n'
    # a stated KV dtype is checked against the table: the fleet tables record none
    with pytest.raises(InputError, match="kv_dtype = 'fp8' stated, but fitted records no"):
        entry(tmp_path, fp8_body)
    with pytest.warns(FingerprintMismatchWarning, match="records no kv_dtype"):
        fp8 = entry(tmp_path, fp8_body, TableTrust(allow_mismatch=True))
    assert bf16.kv_capacity == kv_tokens(ModelShape.from_name("llama-3-8b"), 40)
    assert fp8.hardware[0].kv_capacity == 610_351 == 2 * bf16.kv_capacity + 1  # rounding
    with pytest.raises(InputError, match=r"device\[0\]\.tp\[0\]: give kv_tokens or kv_memory_gb"):
        entry(tmp_path, 'kv_memory_gb = 40\nmodel = "llama-3-8b"\nkv_tokens = 9\n')
    with pytest.raises(InputError, match=r"device\[0\]\.tp\[0\]: kv_dtype 'fp4'"):
        entry(tmp_path, 'kv_memory_gb = 40\nmodel = "llama-3-8b"\nkv_dtype = "fp4"\n')
