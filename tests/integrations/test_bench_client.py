"""``servecal bench``'s client against a small fake OpenAI server (no vLLM): tokens are
counted per streamed chunk, failures and cut-off requests are kept as missed, bad
flags are one line and exit 2."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels.segments import read_table
from servecal.integrations.bench.client import loopback_url, send_workload
from servecal.sched.request import Request

GAP_S = 0.02  # the fake server's time between two chunks


class FakeOpenAI(BaseHTTPRequestHandler):
    """Streams ``max_tokens`` tokens, two per chunk, ``GAP_S`` apart; a prompt whose
    first id is 999 gets HTTP 500, one whose first id is 998 never finishes."""

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # /v1/models
        body = json.dumps({"data": [{"id": "fake", "max_model_len": 2048}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if req["prompt"][0] == 999:
            self.send_response(500)
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"boom")
            return
        req["x-request-id"] = self.headers.get("X-Request-Id")
        self.server.bodies.append(req)  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        left = req["max_tokens"] if req["prompt"][0] != 998 else 10**6
        while left > 0:
            time.sleep(GAP_S)
            k = min(2, left)
            chunk = {"choices": [{"text": "", "token_ids": list(range(k))}]}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()
            left -= k
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture()
def server() -> Iterator[tuple[str, ThreadingHTTPServer]]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    httpd.bodies = []  # type: ignore[attr-defined]
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", httpd
    httpd.shutdown()


def test_tokens_are_counted_per_chunk_and_slos_travel_with_the_request(server) -> None:
    url, httpd = server
    reqs = [Request(i, 10.0 * i, 5, 6, 500.0, 25.0) for i in range(3)]
    got = send_workload(url, "fake", reqs, seed=0, deadline_s=30)
    assert all(g.complete for g in got)
    assert [len(g.token_ms) for g in got] == [6, 6, 6]
    # two tokens per chunk: every other gap is zero, the others the server's spacing
    gaps = [b - a for a, b in zip(got[0].token_ms, got[0].token_ms[1:], strict=False)]
    assert gaps[0] == 0.0 and gaps[1] >= GAP_S * 1000 * 0.5
    body = httpd.bodies[0]
    assert body["vllm_xargs"] == {"tpot_slo_ms": 25.0, "ttft_slo_ms": 500.0}
    assert body["max_tokens"] == 6 and body["ignore_eos"] and body["stream"]
    assert len(body["prompt"]) == 5


def test_failed_and_cut_off_requests_are_kept_as_missed(server, tmp_path: Path) -> None:
    url, _ = server
    from servecal.integrations.bench import client

    reqs = [Request(i, 0.0, 3, 4) for i in range(3)]
    prompts = [[100, 101, 102], [999, 1, 2], [998, 1, 2]]
    import asyncio

    got = asyncio.run(client._drive(url, "fake", reqs, prompts, deadline_s=2.0))
    assert got[0].complete
    assert got[1].error.startswith("HTTP 500")
    assert got[2].error == "not finished by the bench's deadline" and got[2].token_ms
    from servecal.integrations.bench.record import write_bench_run

    summary = write_bench_run(tmp_path / "run", got, None, {"seed": 0})
    assert summary["requests"] == 3 and summary["good"] <= 1 and summary["errors"] == 2
    rq = read_table(tmp_path / "run" / "requests.parquet")
    assert rq["completion_ms"].isna().sum() == 2


def test_the_deadline_counts_from_the_last_request_due(server) -> None:
    """At a low rate the last requests are due late: the run's deadline waits for them
    (counted from the last arrival), so none is cut before it is sent."""
    url, _ = server
    reqs = [Request(i, 600.0 * i, 3, 4) for i in range(3)]  # due at 0, 0.6 and 1.2 s
    # 1 s of slack for a busy host; a deadline from the start would still cut the last
    got = send_workload(url, "fake", reqs, seed=0, deadline_s=1.0)
    assert [g.error for g in got] == [None, None, None]
    assert all(g.complete for g in got)


def test_bench_url_writes_a_run_folder_that_report_reads(server, tmp_path: Path) -> None:
    url, _ = server
    runner = CliRunner()
    out = runner.invoke(app, ["bench", "--url", url, "--workload", "chat", "--rate", "20",
                              "--requests", "8", "--tpot-slo", "100", "--out",
                              str(tmp_path / "b")])  # fmt: skip
    assert out.exit_code == 0, out.output
    rq = read_table(tmp_path / "b" / "run" / "requests.parquet")
    assert len(rq) == 8 and (rq["tokens_out"] == rq["output_tokens"]).all()
    assert (rq["prompt_tokens"] + rq["output_tokens"] <= 2048).all()  # the server's limit
    rep = runner.invoke(app, ["report", str(tmp_path / "b" / "run"), "--out", str(tmp_path / "r")])
    assert rep.exit_code == 0, rep.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url", "http://10.0.0.5:8000", "--rate", "1"], "loopback servers only"),
        (["--url", "http://127.0.0.1:9", "--model-dir", "m", "--rate", "1"], "exactly one of"),
        (["--url", "http://127.0.0.1:9"], "give --rate"),
        (["--url", "http://127.0.0.1:9", "--rate", "-1"], "--rate"),
        (["--model-dir", "nowhere", "--rate", "1"], "--table"),
        (["--url", "http://127.0.0.1:9", "--rate", "1", "--workload", "nope"], "unknown workload"),
        (["--url", "http://127.0.0.1:9", "--rate", "1"], "no OpenAI-compatible server"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    out = CliRunner().invoke(app, ["bench", *args, "--tpot-slo", "25", "--out",
                                   str(tmp_path / "o")])  # fmt: skip
    assert out.exit_code == 2, out.output
    assert message in out.output and "Traceback" not in out.output


def test_only_loopback_urls_are_driven() -> None:
    assert loopback_url("http://localhost:8000/") == "http://localhost:8000"
    assert loopback_url("http://[::1]:8000") == "http://[::1]:8000"
    with pytest.raises(Exception, match="loopback"):
        loopback_url("http://192.168.1.2:8000")


def test_the_server_log_window_moves_every_time_column_onto_the_bench_clock(
    tmp_path: Path,
) -> None:
    """``server_requests``: the requests a plug-in logged that arrived in the bench's
    window, arrival, first token and completion on the bench's clock (so TTFT is the
    engine's own), the steps likewise."""
    import pandas as pd

    from servecal.integrations.bench.record import server_requests, server_steps

    origin = 1_000_000.0  # the server's 0 ms, unix seconds
    log = tmp_path / "log"
    log.mkdir()
    (log / "run.json").write_text(json.dumps({"config": {"vllm": {"clock_origin_unix": origin}}}))
    pd.DataFrame(
        {
            "arrival_ms": [500.0, 2500.0, 9000.0],
            "first_token_ms": [600.0, 2700.0, 9100.0],
            "completion_ms": [900.0, 3000.0, 9500.0],
        }
    ).to_parquet(log / "requests.parquet")
    pd.DataFrame({"start_ms": [550.0, 2600.0]}).to_parquet(log / "iterations.parquet")
    got = server_requests(log, origin + 2.0, origin + 5.0)  # bench 0 ms = server 2000 ms
    assert got["arrival_ms"].tolist() == [500.0]
    assert got["first_token_ms"].tolist() == [700.0] and got["completion_ms"].tolist() == [1000.0]
    assert server_steps(log, origin + 2.0, origin + 5.0)["start_ms"].tolist() == [600.0]
    assert server_requests(tmp_path, origin, origin + 1) is None  # no run log there


# -- prompts that realise a workload's shared prefixes ---------------------------------


def test_equal_block_ids_give_equal_token_blocks() -> None:
    from servecal.integrations.bench.prompts import PROMPT_IDS, prompt_ids

    b = 16
    reqs = [
        Request(0, 0.0, 3 * b, 2, block_ids=(7, 8, 9), block_size=b),
        Request(1, 1.0, 4 * b + 5, 2, block_ids=(7, 8, 10, 11, 12), block_size=b),
        Request(2, 2.0, 2 * b - 3, 2, block_ids=(7, 13), block_size=b),  # partial 13
        Request(3, 3.0, 2 * b, 2, block_ids=(13, 7), block_size=b),
    ]
    p = prompt_ids(reqs, seed=5)
    assert [len(x) for x in p] == [r.prompt_tokens for r in reqs]
    block = lambda k, i: p[k][i * b : (i + 1) * b]  # noqa: E731
    assert block(0, 0) == block(1, 0) == block(2, 0) == block(3, 1)  # id 7, wherever it is
    assert block(0, 1) == block(1, 1)  # id 8
    assert block(0, 2) != block(1, 2)  # ids 9 and 10
    assert p[2][b:] == block(3, 0)[: b - 3]  # a partial block is its id's first tokens
    assert all(PROMPT_IDS[0] <= t < PROMPT_IDS[1] for x in p for t in x)
    assert prompt_ids(reqs, seed=5) == p  # deterministic
    assert prompt_ids(reqs, seed=6)[0][:b] != block(0, 0)  # and seeded


def test_prompts_without_identity_are_the_random_ones_as_before() -> None:
    import numpy as np

    from servecal.integrations.bench.prompts import prompt_ids

    reqs = [Request(i, 0.0, 5 + i, 2) for i in range(3)]
    rng = np.random.default_rng(3)
    assert prompt_ids(reqs, 3) == [rng.integers(100, 1000, size=5 + i).tolist() for i in range(3)]


def test_block_scaling_keeps_the_blocks_and_scales_the_tokens() -> None:
    from servecal.sched.workloads.block_scale import with_block_size

    reqs = [
        Request(0, 0.0, 1024, 320, block_ids=(1, 2), block_size=512),
        Request(1, 5.0, 1300, 10, block_ids=(1, 2, 3), block_size=512),
        Request(2, 6.0, 700, 64),  # no identity: unchanged
    ]
    a, b, c = with_block_size(reqs, 16)
    assert (a.prompt_tokens, a.output_tokens, a.block_size) == (32, 10, 16)
    assert b.prompt_tokens == 2 * 16 + 9  # 276 of 512 tokens in the last block: 9 of 16
    assert -(-b.prompt_tokens // 16) == len(b.block_ids) == 3 and b.output_tokens == 1
    assert c == reqs[2]


MOONCAKE = [  # two turns of one conversation and an unrelated request; 512-token blocks
    {"timestamp": 0, "input_length": 1024, "output_length": 64, "hash_ids": [1, 2]},
    {"timestamp": 100, "input_length": 700, "output_length": 32, "hash_ids": [5, 6]},
    {"timestamp": 200, "input_length": 2000, "output_length": 64, "hash_ids": [1, 2, 3, 4]},
]


def test_bench_sends_a_traces_shared_prefixes_and_simulate_replays_them(
    server, tmp_path: Path
) -> None:
    import numpy as np

    from servecal.integrations.bench.client import rid_of
    from servecal.sched.workloads.trace import load_trace

    url, httpd = server
    trace = tmp_path / "conv.jsonl"
    trace.write_text("".join(json.dumps(row) + "\n" for row in MOONCAKE))
    out = CliRunner().invoke(app, [
        "bench", "--url", url, "--workload", f"trace:{trace}", "--rate", "20", "--requests", "3",
        "--tpot-slo", "100", "--block-tokens", "16", "--out", str(tmp_path / "b"),
    ])  # fmt: skip
    assert out.exit_code == 0, out.output
    rids = {rid_of(body["x-request-id"], "servecal-p1"): body for body in httpd.bodies}
    assert sorted(rids) == [0, 1, 2]
    bodies = [rids[k] for k in range(3)]
    first, other, turn2 = (body["prompt"] for body in bodies)
    assert [len(first), len(other), len(turn2)] == [32, 16 + 6, 3 * 16 + 15]
    assert turn2[:32] == first  # the conversation's first two blocks, token for token
    assert other[:16] != first[:16]
    run = tmp_path / "b" / "run"
    rq = read_table(run / "requests.parquet")
    assert [list(x) for x in rq["block_ids"]] == [[1, 2], [5, 6], [1, 2, 3, 4]]
    assert set(rq["block_size"]) == {16}
    replayed = load_trace(run, None, 100.0, None, np.random.default_rng(0))
    assert [r.block_ids for r in replayed] == [(1, 2), (5, 6), (1, 2, 3, 4)]
    assert [r.block_size for r in replayed] == [16, 16, 16]
    assert [r.prompt_tokens for r in replayed] == [32, 22, 63]


def test_the_servers_cached_tokens_join_the_clients_rows(tmp_path: Path) -> None:
    from servecal.integrations.bench.client import Received
    from servecal.integrations.bench.record import served_cached_tokens, write_bench_run
    from servecal.integrations.vllm.runlog import RunLog

    sys.path.insert(0, str(Path(__file__).parents[1] / "costmodels"))
    from tablefactory import small_table

    log = RunLog(tmp_path / "server", small_table(), {"policy": "vllm-default"}, flush_s=3600)
    for rid, cached in ((0, 0), (1, 32)):
        name = f"cmpl-servecal-p1-{rid}-0-abcd1234"
        log.arrived(name, 0.0, 40, 2, 500.0, 25.0)
        log.admitted(name, cached)
        log.started(name, log.step([0.0, 1.0, 0, 40 - cached, 1, 0.0, 0.0, 1.0, 5.0, 40, 40, 1.0]))
        log.finished(name, 3.0, log.step([1.0, 1.0, 1, 0, 0, 40.0, 0, 1.0, 5.0, 0, 1, 1.0]), 2)
    log.arrived("cmpl-other-0-0-x", 0.0, 40, 2, 500.0, 25.0)  # another client's request
    log.finished("cmpl-other-0-0-x", 3.0, log.steps - 1, 0)
    cached = served_cached_tokens(tmp_path / "server", "servecal-p1")  # from the tail
    assert cached == {0: 0, 1: 32}
    log.close()
    assert served_cached_tokens(tmp_path / "server", "servecal-p1") == cached  # from the parts
    got = [Received(Request(i, 0.0, 40, 2), token_ms=[5.0, 6.0]) for i in range(2)]
    summary = write_bench_run(tmp_path / "run", got, None, {"seed": 0}, cached)
    assert summary["prefix_hit_share"] == 32 / 80
    from servecal.sched.experiment.versus import run_quantiles, table

    measured = run_quantiles(tmp_path / "run")
    assert measured["prefix_hit_share"] == 32 / 80
    assert "| prefix-cache hits (prompt tokens) | 40.0% | 40.0% | +0.0 pts |" in table(
        measured, measured
    )
