"""Factories for driving vLLM's real v1 scheduler on a CPU (not a test module).

As vLLM's own ``tests/v1/core/utils.py`` does: a hand-written ``config.json``
(LlamaForCausalLM, tiny sizes) so no weights or tokenizer are needed, a
``KVCacheConfig`` with one ``FullAttentionSpec`` group, ``Request``\\ s with a
block hasher, and hand-made ``ModelRunnerOutput``\\ s fed to
``update_from_output``. The scheduler's clock is replaced by :class:`FakeClock`
so that step times and deadlines are exact.

Import this only after ``pytest.importorskip("vllm")``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import torch  # noqa: E402
from vllm.engine.arg_utils import EngineArgs  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

PLUGIN = "servecal.integrations.vllm.SLOWeaveScheduler"
BLOCK = 16
EOS = 2047

#: The served model: the profiler's "tiny" shape, as a Hugging Face config.
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 2048,
    "max_position_embeddings": 16384,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "torch_dtype": "float32",
    "tie_word_embeddings": False,
}


def write_model(folder: Path, **overrides: Any) -> Path:
    """A model folder with only ``config.json`` (enough for vLLM's config and scheduler)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**TINY_LLAMA, **overrides}))
    return folder


def engine_args(model: Path, servecal: dict[str, Any] | None, *, tokens: int = 2048,
                seqs: int = 256, async_scheduling: bool = False,
                scheduler_cls: str | None = PLUGIN) -> EngineArgs:  # fmt: skip
    """What ``vllm serve MODEL --scheduler-cls ... --additional-config ...`` builds."""
    return EngineArgs(
        model=str(model),
        skip_tokenizer_init=True,
        dtype="float32",
        scheduler_cls=scheduler_cls,
        additional_config={"servecal": servecal} if servecal is not None else {},
        max_num_batched_tokens=tokens,
        max_num_seqs=seqs,
        max_model_len=8192,
        enable_prefix_caching=False,
        async_scheduling=async_scheduling,
    )


def build(args: EngineArgs, num_blocks: int = 20_000) -> Any:
    """The scheduler exactly as ``EngineCore`` resolves and constructs it.

    vLLM's CPU platform turns asynchronous scheduling off; asked for, it is turned
    back on here, as a GPU platform would leave it (vLLM's own scheduler tests set
    it on ``SchedulerConfig`` directly)."""
    vllm_config = args.create_engine_config()
    if args.async_scheduling:
        vllm_config.scheduler_config.async_scheduling = True
    cls = vllm_config.scheduler_config.get_scheduler_cls()
    kv = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer"],
                FullAttentionSpec(
                    block_size=BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32
                ),
            )
        ],
    )
    vllm_config.cache_config.num_gpu_blocks = num_blocks
    return cls(
        vllm_config=vllm_config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=BLOCK,
        log_stats=False,
    )


class FakeClock:
    """Seconds that move only when told to."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance_ms(self, ms: float) -> None:
        self.t += ms / 1000.0


_hash_ready = False


def request(rid: str, prompt: int, out: int, **extra: Any) -> Request:
    """A request of ``prompt`` tokens that decodes ``out`` tokens (EOS never sampled)."""
    global _hash_ready
    if not _hash_ready:
        init_none_hash(hash)
        _hash_ready = True
    params = SamplingParams(max_tokens=out, ignore_eos=True, extra_args=extra or None)
    return Request(
        request_id=rid,
        prompt_token_ids=[(sum(map(ord, rid)) + i) % 2000 for i in range(prompt)],
        sampling_params=params,
        pooling_params=None,
        arrival_time=time.time(),
        block_hasher=get_request_block_hasher(BLOCK, hash),
    )


def runner_output(scheduler: Any, out: Any) -> ModelRunnerOutput:
    """What the model runner returns for ``out``: one token per request whose prompt is
    done after this step, none for a request still prefilling."""
    ids = list(out.num_scheduled_tokens)
    sampled = [[] if scheduler.requests[r].is_prefill_chunk else [7] for r in ids]
    return ModelRunnerOutput(
        req_ids=ids,
        req_id_to_index={r: i for i, r in enumerate(ids)},
        sampled_token_ids=sampled,
        logprobs=None,
        prompt_logprobs_dict={},
        pooler_output=[],
    )


def step(scheduler: Any, clock: FakeClock, duration: Callable[[Any], float] | float) -> Any:
    """One step: schedule, let ``duration`` ms pass (a number or a function of the
    SchedulerOutput), feed the output back. Returns the SchedulerOutput."""
    out = scheduler.schedule()
    clock.advance_ms(duration(out) if callable(duration) else duration)
    scheduler.update_from_output(out, runner_output(scheduler, out))
    return out


def decode_set(scheduler: Any) -> list[Any]:
    """Running requests whose prefill is done."""
    return [r for r in scheduler.running if not r.is_prefill_chunk]


def use_clock(scheduler: Any, clock: FakeClock) -> None:
    """Drive the plug-in's clock (its time axis starts now)."""
    scheduler._sw_clock = clock
    scheduler._sw_perf0 = clock()


def now_ms(scheduler: Any) -> float:
    """The plug-in's time axis (ms since ``use_clock``)."""
    return (scheduler._sw_clock() - scheduler._sw_perf0) * 1000.0


def decoding_kv(scheduler: Any) -> dict[str, int]:
    """KV length of each request decoding now (take it before ``schedule()``)."""
    return {r.request_id: r.num_computed_tokens for r in decode_set(scheduler)}


def shape(scheduler: Any, out: Any, before: dict[str, int]) -> tuple[int, int, float, float]:
    """(n_decode, chunk, ctx, prefix) of what ``out`` scheduled, worked out by the test
    from :func:`decoding_kv` taken before ``schedule()``."""
    nst = out.num_scheduled_tokens
    n = sum(1 for r in before if r in nst)
    ctx = sum(before.values()) / len(before) if before else 0.0
    chunk = 0
    weighted = 0
    for rid, tokens in nst.items():
        if rid in before:
            continue
        chunk += tokens
        weighted += (scheduler.requests[rid].num_computed_tokens - tokens) * tokens
    return n, chunk, ctx, weighted / chunk if chunk else 0.0
