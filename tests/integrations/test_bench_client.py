"""``servecal bench``'s client against a small fake OpenAI server (no vLLM): tokens are
counted per streamed chunk, failures and cut-off requests are kept as missed, bad
flags are one line and exit 2."""

from __future__ import annotations

import json
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
