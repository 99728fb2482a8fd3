"""Trace replay: Azure and plain formats, rate rescaling, bad files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from servecal.sched.workloads import generate, load_trace
from servecal.util.errors import InputError

DATA = Path(__file__).resolve().parents[1] / "data"
AZURE = DATA / "azure_conv_head200.csv"  # first 200 rows of the Azure 2023 conversation trace
ARXIV = DATA / "arxiv_lengths_head100.csv"  # first 100 rows of Vidur's arXiv lengths


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def test_azure_rows_keep_their_lengths_and_order() -> None:
    raw = pd.read_csv(AZURE)
    reqs = load_trace(AZURE, None, 25.0, None, _rng())
    assert len(reqs) == 200
    assert [r.prompt_tokens for r in reqs] == list(raw["ContextTokens"])
    assert [r.output_tokens for r in reqs] == list(raw["GeneratedTokens"])
    t = pd.to_datetime(raw["TIMESTAMP"])
    expected_ms = (t - t[0]).dt.total_seconds().to_numpy() * 1000
    np.testing.assert_allclose([r.arrival_ms for r in reqs], expected_ms)
    assert reqs[0].arrival_ms == 0.0
    assert all(r.slo_class == "trace" and r.tpot_slo_ms == 25.0 for r in reqs)
    assert reqs[0].ttft_slo_ms == 500.0 + 0.5 * reqs[0].prompt_tokens


def test_rate_rescaling_hits_the_target_and_keeps_gap_shape() -> None:
    original = np.array([r.arrival_ms for r in load_trace(AZURE, None, 25.0, None, _rng())])
    fast = np.array([r.arrival_ms for r in load_trace(AZURE, 40.0, 25.0, 300.0, _rng())])
    assert (len(fast) - 1) / (fast[-1] / 1000) == pytest.approx(40.0)
    ratio = np.diff(fast)[np.diff(original) > 0] / np.diff(original)[np.diff(original) > 0]
    np.testing.assert_allclose(ratio, ratio[0])  # one factor for every gap


def test_flat_ttft_window_and_duration() -> None:
    reqs = load_trace(AZURE, 10.0, 10.0, 300.0, _rng(), n_requests=50)
    assert len(reqs) == 50 and all(r.ttft_slo_ms == 300.0 for r in reqs)
    short = load_trace(AZURE, 10.0, 10.0, None, _rng(), duration_s=2.0)
    assert 0 < len(short) < 200 and max(r.arrival_ms for r in short) <= 2000.0


def test_plain_and_vidur_csvs(tmp_path: Path) -> None:
    plain = tmp_path / "plain.csv"
    plain.write_text("prompt_tokens,output_tokens,arrival_s\n10,3,2.0\n20,4,0.5\n30,5,1.0\n")
    reqs = load_trace(plain, None, 50.0, None, _rng())
    assert [r.prompt_tokens for r in reqs] == [20, 30, 10]  # sorted by arrival
    assert [r.arrival_ms for r in reqs] == [0.0, 500.0, 1500.0]
    # Lengths only: Poisson arrivals at the given rate, drawn with the rng.
    a = load_trace(ARXIV, 5.0, 50.0, None, np.random.default_rng(3))
    b = load_trace(ARXIV, 5.0, 50.0, None, np.random.default_rng(3))
    assert a == b and len(a) == 100
    assert a[0].prompt_tokens == 3772 and a[0].output_tokens == 54
    with pytest.raises(InputError, match="no arrival times"):
        load_trace(ARXIV, None, 50.0, None, _rng())


def test_context_limit_clips_trace_rows(tmp_path: Path) -> None:
    f = tmp_path / "big.csv"
    f.write_text("prompt_tokens,output_tokens\n9000,100\n8000,500\n")
    reqs = load_trace(f, 1.0, 50.0, None, _rng())
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs] == [(8191, 1), (8000, 192)]


def test_generate_replays_trace_names() -> None:
    reqs = generate(f"trace:{AZURE}", 8.0, n_requests=100, tpot_slo_ms=10.0, rng=_rng())
    arr = np.array([r.arrival_ms for r in reqs])
    assert len(reqs) == 100 and (len(arr) - 1) / (arr[-1] / 1000) == pytest.approx(8.0)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("a,b\n1,2\n", "no known trace columns"),
        ("prompt_tokens,output_tokens\n", "no rows"),
        ("prompt_tokens,output_tokens\n5,5\nx,5\n", "column prompt_tokens, line 3"),
        ("prompt_tokens,output_tokens\n5,0\n", "column output_tokens, line 2"),
        ("prompt_tokens,output_tokens\n5,2.5\n", "whole number"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nnot-a-date,5,5\n", "TIMESTAMP, line 2"),
        ("prompt_tokens,output_tokens,arrival_s\n5,5,-1\n", "arrival_s, line 2"),
        ("prompt_tokens,output_tokens,arrival_s\n5,5,1\n6,6,1\n", "share one time"),
    ],
)
def test_bad_files_give_one_line_errors(tmp_path: Path, content: str, match: str) -> None:
    f = tmp_path / "bad.csv"
    f.write_text(content)
    with pytest.raises(InputError, match=match) as info:
        load_trace(f, 2.0, 25.0, None, _rng())
    assert "\n" not in str(info.value) and str(f) in str(info.value)


def test_bad_arguments_are_input_errors() -> None:
    with pytest.raises(InputError, match="n_requests"):
        load_trace(AZURE, 1.0, 25.0, None, _rng(), n_requests=0)
    with pytest.raises(InputError, match="rate"):
        load_trace(AZURE, -1.0, 25.0, None, _rng())
    with pytest.raises(InputError, match="SLOs must be > 0"):
        load_trace(AZURE, 1.0, 0.0, None, _rng())
    with pytest.raises(InputError, match="SLOs must be > 0"):
        load_trace(AZURE, 1.0, 25.0, -5.0, _rng())


def test_missing_or_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        load_trace(tmp_path / "nope.csv", 1.0, 25.0, None, _rng())
    binary = tmp_path / "x.parquet"
    binary.write_bytes(b"\x00\x01garbage")
    with pytest.raises(InputError, match="cannot read"):
        load_trace(binary, 1.0, 25.0, None, _rng())


def test_a_run_folder_replays_its_arrivals_and_lengths(tmp_path: Path) -> None:
    """``trace:RUN_FOLDER``: a run's ``requests.parquet`` (a file, or a folder of parts
    as the plug-in writes) gives the same arrivals (from the first) and lengths."""
    rows = pd.DataFrame({"rid": [0, 1, 2], "arrival_ms": [340.0, 850.0, 860.0],
                         "prompt_tokens": [2113, 225, 395], "output_tokens": [103, 98, 452],
                         "first_token_ms": [400.0, 900.0, 990.0]})  # fmt: skip
    single = tmp_path / "run"
    single.mkdir()
    rows.to_parquet(single / "requests.parquet")
    parted = tmp_path / "server-log" / "requests.parquet"
    parted.mkdir(parents=True)
    rows.iloc[:2].to_parquet(parted / "part-000000.parquet")
    rows.iloc[2:].to_parquet(parted / "part-000001.parquet")
    for folder in (single, parted.parent):
        reqs = load_trace(folder, None, 50.0, None, _rng())
        assert [r.arrival_ms for r in reqs] == pytest.approx([0.0, 510.0, 520.0])
        assert [r.prompt_tokens for r in reqs] == [2113, 225, 395]
        assert [r.output_tokens for r in reqs] == [103, 98, 452]
    assert generate(f"trace:{single}", None, 3, tpot_slo_ms=50.0, rng=_rng())[1].arrival_ms == (
        pytest.approx(510.0)
    )


def test_seconds_arrivals_win_over_a_missing_ms_column(tmp_path: Path) -> None:
    path = tmp_path / "plain.csv"
    path.write_text("prompt_tokens,output_tokens,arrival_s\n10,5,0\n20,6,1.5\n")
    reqs = load_trace(path, None, 50.0, None, _rng())
    assert [r.arrival_ms for r in reqs] == [0.0, 1500.0]


MOONCAKE = DATA / "mooncake" / "conversation_head200.jsonl"  # first 200 lines, Mooncake


def test_mooncake_rows_carry_their_block_ids_unclipped() -> None:
    import json

    raw = [json.loads(line) for line in MOONCAKE.read_text().splitlines()]
    reqs = load_trace(MOONCAKE, None, 25.0, None, _rng())
    assert len(reqs) == 200
    assert [r.prompt_tokens for r in reqs] == [x["input_length"] for x in raw]  # > 8192 kept
    assert [r.block_ids for r in reqs] == [tuple(x["hash_ids"]) for x in raw]
    assert all(r.block_size == 512 for r in reqs)
    np.testing.assert_allclose([r.arrival_ms for r in reqs], [x["timestamp"] for x in raw])


def test_a_bad_mooncake_line_is_one_error(tmp_path: Path) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]}\n'
                   '{"timestamp": 5, "input_length": 10}\n')  # fmt: skip
    with pytest.raises(InputError, match="line 2"):
        load_trace(bad, None, 25.0, None, _rng())
