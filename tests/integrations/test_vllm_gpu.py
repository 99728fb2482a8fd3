"""The plug-in in a real vLLM engine on a GPU: a minute of serving, then its run folder.

The model is the tiny Llama of ``vllmkit`` with dummy weights (nothing to download);
requests are token ids (no tokenizer). The engine runs in-process so the test can
reach the scheduler and close its log. Skips without CUDA.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

SERVE_S = 60.0


def test_a_minute_of_serving_leaves_a_run_folder_servecal_can_read(tmp_path: Path) -> None:
    from vllmguard import require_vllm

    require_vllm()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the scheduler in this process
    import numpy as np
    import pandas as pd
    import vllmkit as K
    from test_vllm_scheduler import truth_table
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from servecal.cli import app

    model = K.write_model(tmp_path / "model", torch_dtype="float16")
    table = truth_table()
    doc = table.to_json()
    doc["fingerprint"]["dtype"] = "float16"
    (tmp_path / "table.json").write_text(json.dumps(doc))
    llm = LLM(
        model=str(model),
        skip_tokenizer_init=True,
        load_format="dummy",
        dtype="float16",
        max_model_len=4096,
        max_num_batched_tokens=2048,
        max_num_seqs=128,
        gpu_memory_utilization=0.3,
        enforce_eager=True,
        scheduler_cls=K.PLUGIN,
        additional_config={
            "servecal": {
                "table": str(tmp_path / "table.json"),
                "tpot_slo_ms": 50,
                "run_dir": str(tmp_path / "run"),
                "flush_every": 200,
            }
        },  # fmt: skip
    )
    rng = np.random.default_rng(0)
    t0 = time.monotonic()
    served = 0
    while time.monotonic() - t0 < SERVE_S:
        prompts = [
            TokensPrompt(prompt_token_ids=rng.integers(0, 2000, int(n)).tolist())
            for n in rng.choice([32, 256, 1500], size=64)
        ]
        outs = llm.generate(prompts, SamplingParams(max_tokens=64, ignore_eos=True),
                            use_tqdm=False)  # fmt: skip
        served += sum(len(o.outputs[0].token_ids) == 64 for o in outs)
    scheduler = llm.llm_engine.engine_core.engine_core.scheduler
    scheduler.shutdown()
    it = pd.read_parquet(tmp_path / "run" / "iterations.parquet")
    rq = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert served == len(rq) and rq["completion_ms"].notna().all()
    assert len(it) > 500 and (it["duration_ms"] > 0).all()
    assert it["pred_p50_ms"].notna().all() and (it["chunk"] > 0).any()
    runner = CliRunner()
    verdict = runner.invoke(app, ["validate", str(tmp_path / "table.json"), str(tmp_path / "run")])
    assert verdict.exit_code in (0, 1), verdict.output  # a synthetic table: drifted is fine
    page = runner.invoke(app, ["report", str(tmp_path / "run"), "--out", str(tmp_path / "rep")])
    assert page.exit_code == 0, page.output
