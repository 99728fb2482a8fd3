"""The side-by-side benchmark's inputs (benchmarks/vidur_side_by_side.py): both
simulators get the same requests, and Vidur's profiles are laid out where its offline
Hugging Face download finds them. Vidur itself is not needed here."""

from __future__ import annotations

import csv
import importlib.util
import json
import lzma
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests" / "data" / "azure_conv_head200.csv"


def _bench():
    spec = importlib.util.spec_from_file_location(
        "vidur_side_by_side", ROOT / "benchmarks" / "vidur_side_by_side.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_both_simulators_get_the_same_requests_at_the_rate_within_vidurs_context(
    tmp_path: Path,
) -> None:
    bench = _bench()
    ours, theirs = bench.write_requests(TRACE, 150, 4.0, tmp_path)
    a = list(csv.DictReader(ours.open()))
    b = list(csv.DictReader(theirs.open()))
    assert len(a) == len(b) == 150
    for x, y in zip(a, b, strict=True):
        assert (x["prompt_tokens"], x["output_tokens"], x["arrival_s"]) == (
            y["PromptTokenCount"], y["CompletionTokenCount"], y["Time"])  # fmt: skip
        assert int(x["prompt_tokens"]) + int(x["output_tokens"]) <= bench.VIDUR_MAX_TOKENS
        assert y["Date"] == bench.TRACE_DATE
    arrivals = [float(x["arrival_s"]) for x in a]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    assert abs(len(arrivals[1:]) / arrivals[-1] - 4.0) < 1e-3  # mean rate 4 req/s
    # a prompt the trace gives whole is kept whole
    source = list(csv.DictReader(TRACE.open()))[:150]
    kept = [s for s in source if int(s["ContextTokens"]) + int(s["GeneratedTokens"]) <= 4096]
    assert kept and all(
        int(x["prompt_tokens"]) == int(s["ContextTokens"])
        for x, s in zip(a, source, strict=True)
        if s in kept
    )


def test_attention_samples_become_vidur_rows(tmp_path: Path) -> None:
    bench = _bench()
    samples = tmp_path / "samples.txt"
    samples.write_text("# header\nD 1024 3 : 0.5 0.6   [123, note]\nP 512 : 0:0.1 32:0.2\n")
    rows = bench._attention_rows(samples)
    decode = [r for r in rows if not r["is_prefill"]]
    prefill = [r for r in rows if r["is_prefill"]]
    assert [(r["batch_size"], r["kv_cache_size"], r["time_stats.attn_decode.median"])
            for r in decode] == [(3, 1024, 0.5), (4, 1024, 0.6)]  # fmt: skip
    assert [(r["prefill_chunk_size"], r["kv_cache_size"], r["time_stats.attn_prefill.median"])
            for r in prefill] == [(512, 0, 0.1), (512, 32, 0.2)]  # fmt: skip
    assert all(r["n_kv_head"] == 32 and r["block_size"] == 16 for r in rows)


def test_profiles_are_laid_out_as_an_offline_hugging_face_cache(tmp_path: Path) -> None:
    bench = _bench()
    src = tmp_path / "src"
    (src / "network").mkdir(parents=True)
    (src / "llama2_7b_mlp.csv").write_text("n_head,num_tokens,time_stats.emb.median\n32,1,0.01\n")
    (src / "llama2_7b_attention_samples.txt").write_text("D 32 1 : 0.009\n")
    for name in ("all_reduce", "send_recv"):
        (src / "network" / f"a100_dgx_{name}.csv").write_text(",size,collective\n0,2048,x\n")
    cache = tmp_path / "cache"
    bench.vidur_profiles(src, cache)
    expected = {"compute": ("mlp", "attention"), "network": ("all_reduce", "send_recv")}
    for kind, files in expected.items():
        org, name = bench.DATASETS[kind].split("/")
        repo = cache / "profiling_data" / kind / f"datasets--{org}--{name}"
        snapshot = repo / "snapshots" / (repo / "refs" / "main").read_text()
        config = json.loads((snapshot / "config.json").read_text())
        assert config.get("model", bench.VIDUR_MODEL) == bench.VIDUR_MODEL
        for f in files:
            with lzma.open(snapshot / f"{f}.csv.xz", "rt") as text:
                assert len(text.read().splitlines()) == 2  # header + one row
