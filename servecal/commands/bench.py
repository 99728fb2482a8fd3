"""``servecal bench``: a workload against a real OpenAI-compatible server, as a run folder."""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path

import typer

from servecal.commands._common import user_errors, writes_folder
from servecal.util.errors import InputError
from servecal.util.niceness import check_niceness

DEFAULT_RANGE = "0.5:8"


def _requests(workload: str, rate: float, n: int, seed: int, tpot_slo: float,
              context_limit: int | None, block_tokens: int | None = None) -> list:  # fmt: skip
    """The workload's requests; with ``block_tokens``, those with prefix identity scaled
    to blocks of that many tokens (:mod:`servecal.sched.workloads.block_scale`); clipped
    to the server's context, their block ids cut to what their prompts still cover."""
    import numpy as np

    from servecal.sched.workloads.block_scale import with_block_size
    from servecal.sched.workloads.build import clip_to_context
    from servecal.sched.workloads.generate import generate

    drawn = generate(workload, rate, n, tpot_slo_ms=tpot_slo, rng=np.random.default_rng(seed))
    if block_tokens is not None:
        drawn = with_block_size(drawn, block_tokens)
    if context_limit is None:
        return drawn
    prompt, output = clip_to_context(
        np.array([r.prompt_tokens for r in drawn]),
        np.array([r.output_tokens for r in drawn]),
        context_limit,
    )
    return [
        replace(r, prompt_tokens=int(p), output_tokens=int(o),
                block_ids=r.block_ids[: -(-int(p) // r.block_size)])
        for r, p, o in zip(drawn, prompt, output, strict=True)
    ]  # fmt: skip


def _next_free(out: Path, stem: str) -> Path:
    k = 1
    while (path := out / (stem if k == 1 else f"{stem}-{k}")).exists():
        k += 1
    return path


class _Bench:
    """One server (given or started) and the probes run against it."""

    def __init__(self, out: Path, url: str, model: str, context_limit: int | None,
                 server_log: Path | None, flush_s: float, settings: dict) -> None:  # fmt: skip
        self.out, self.url, self.model = out, url, model
        self.context_limit = context_limit
        self.server_log, self.flush_s = server_log, flush_s
        self.settings = settings
        self.probes = 0

    def run(self, rate: float, name: str | None = None) -> dict:
        from servecal.integrations.bench.client import send_workload
        from servecal.integrations.bench.record import (
            served_cached_tokens,
            server_steps,
            write_bench_run,
        )

        s = self.settings
        requests = _requests(s["workload"], rate, s["requests"], s["seed"], s["tpot_slo_ms"],
                             self.context_limit, s.get("block_tokens"))  # fmt: skip
        self.probes += 1
        id_prefix = f"servecal-p{self.probes}"  # names this probe's requests in the server log
        start = time.time()
        received = send_workload(self.url, self.model, requests, s["seed"], s["timeout_s"],
                                 id_prefix)  # fmt: skip
        end = time.time()
        steps = cached = None
        if self.server_log is not None:
            time.sleep(self.flush_s + 1.0)  # the plug-in flushes at least every flush_s
            steps = server_steps(self.server_log, start, end)
            cached = served_cached_tokens(self.server_log, id_prefix)
        folder = self.out / (name or f"probe-{self.probes:02d}-rate-{rate:g}")
        config = {
            **s,
            "rate": rate,
            "executor": "server",
            "url": self.url,
            "served_model": self.model,  # not "model": that key is a fingerprint's
        }
        summary = write_bench_run(folder, received, steps, config, cached)
        p99_tpot = summary["p99_tpot_ms"] if summary["p99_tpot_ms"] is not None else math.nan
        hits = summary.get("prefix_hit_share")
        typer.echo(
            f"{folder.name}: {rate:g} req/s, attainment {summary['attainment']:.1%}, "
            f"goodput {summary['goodput']:.3g} req/s, P99 TPOT {p99_tpot:.2f} ms, "
            f"{summary['errors']} errors"
            + (f", prefix-cache hits {hits:.1%} of prompt tokens" if hits is not None else "")
        )
        return summary


def _check_target(
    url: str | None, model_dir: Path | None, dummy_model: str | None, nice: int | None
) -> None:
    """One server to drive: a running one (``--url``) or one bench starts."""
    if sum(x is not None for x in (url, model_dir, dummy_model)) != 1:
        raise InputError(
            "give exactly one of --url (a running server), --model-dir or --dummy-model (start one)"
        )
    check_niceness(nice)
    if nice is not None and url is not None:
        raise InputError("--nice sets the niceness of a server bench starts: not with --url")


def _check_load(tpot_slo: float, timeout_s: float, rate: float | None, searching: bool) -> None:
    """The SLO, the deadline and the offered load (or a search for it)."""
    if not (tpot_slo > 0 and math.isfinite(tpot_slo)):
        raise InputError(f"--tpot-slo {tpot_slo:g}: expected a number of ms > 0")
    if not (timeout_s > 0 and math.isfinite(timeout_s)):
        raise InputError(f"--timeout-s {timeout_s:g}: expected seconds > 0")
    if rate is None and not searching:
        raise InputError("give --rate, or --max-goodput to search it")
    if rate is not None and not (rate > 0 and math.isfinite(rate)):
        raise InputError(f"--rate {rate:g}: expected req/s > 0")


def _check_server(table: Path | None, policy: str) -> None:
    """What starting a vLLM server with the plug-in needs."""
    if table is None:
        raise InputError("--model-dir needs --table (the plug-in's cost table)")
    if not table.is_file():
        raise InputError(f"--table {table}: no such file")
    if policy not in ("sloweave", "vllm"):
        raise InputError(f"--policy {policy!r}: expected sloweave or vllm")


@user_errors
@writes_folder("out")
def bench_command(
    out: Path = typer.Option(..., help="Output folder: one run folder per rate measured."),
    url: str = typer.Option(
        None, help="A running server (loopback only), e.g. http://127.0.0.1:8000."
    ),
    model_dir: Path = typer.Option(
        None, "--model-dir", help="Start a vLLM server on this model folder (its config.json)."
    ),
    dummy_model: str = typer.Option(
        None,
        "--dummy-model",
        help="Instead of --model-dir: a folder of this servecal model shape (Llama; Qwen-MoE for "
        "a MoE shape), random weights.",
    ),
    table: Path = typer.Option(None, help="With --model-dir: the plug-in's cost table."),
    policy: str = typer.Option(
        "sloweave", help="With --model-dir: sloweave, or vllm (vLLM's own scheduler, logged)."
    ),
    server_python: str = typer.Option(
        None,
        "--server-python",
        help="With --model-dir: the Python that has vLLM [default: this one].",
    ),
    max_num_batched_tokens: int = typer.Option(
        512, min=1, help="With --model-dir: vLLM's token cap per step."
    ),
    max_model_len: int = typer.Option(4096, min=2, help="With --model-dir: vLLM's context limit."),
    kv_cache_bytes: int = typer.Option(1 << 30, min=1, help="With --model-dir: KV cache size."),
    real_weights: bool = typer.Option(
        False, "--real-weights", help="Load the folder's weights (default: random)."
    ),
    compile_model: bool = typer.Option(
        False, "--compile", help="Let vLLM compile (default: eager)."
    ),
    nice: int = typer.Option(
        None,
        help="With --model-dir: the server's niceness, -20..19 (-20 on a shared host keeps "
        "neighbours' load out of its steps; below 0 needs root). Default: this process's.",
    ),
    prefix_caching: bool = typer.Option(
        False,
        "--prefix-caching/--no-prefix-caching",
        help="With --model-dir: vLLM's automatic prefix caching (off: every prompt is "
        "prefilled whole, as the cost table and a simulation without identity assume).",
    ),
    block_tokens: int = typer.Option(
        None,
        "--block-tokens",
        min=1,
        help="Scale requests with prefix identity (a Mooncake trace, NAME+prefix) to blocks "
        "of this many tokens (512 -> 32: lengths / 16; the CPU engine takes multiples of 32); "
        "a started server's KV block size too.",
    ),
    server_arg: list[str] = typer.Option(
        [], "--server-arg", help="One more vLLM flag (repeatable)."
    ),
    workload: str = typer.Option(
        "mixed", help="chat|mixed|long|bursty|multislo|tenants|trace:PATH"
    ),
    rate: float = typer.Option(
        None, help="Arrival rate, req/s (Poisson, or the trace's times scaled)."
    ),
    requests: int = typer.Option(100, min=1, max=1_000_000, help="Requests per run."),
    seed: int = typer.Option(0, help="Arrivals, lengths and prompt ids."),
    tpot_slo: float = typer.Option(
        ..., "--tpot-slo", help="TPOT SLO in ms of requests without their own."
    ),
    timeout_s: float = typer.Option(
        600.0,
        "--timeout-s",
        help="Seconds a run waits after its last request is due; unfinished ones count as missed.",
    ),
    max_goodput: bool = typer.Option(
        False, "--max-goodput", help="Search the highest rate within SLO."
    ),
    rate_range: str = typer.Option(DEFAULT_RANGE, help="With --max-goodput: LO:HI[:CAP] req/s."),
    rate_tol: float = typer.Option(
        0.05, "--rate-tol", help="With --max-goodput: stop when the gap is below this share."
    ),
) -> None:
    """Drive a real OpenAI-compatible server with a servecal workload; write run folders."""
    from servecal.integrations.bench.client import loopback_url, served_model
    from servecal.sched.experiment.goodput import Bracket, search_sequentially

    _check_target(url, model_dir, dummy_model, nice)
    _check_load(tpot_slo, timeout_s, rate, max_goodput)
    bracket = None
    if max_goodput:  # a real server's probe costs minutes: expand down at most 4x
        parsed = Bracket.parse(rate_range, rel_tol=rate_tol)
        bracket = replace(parsed, floor=parsed.lo / 4)
    settings = {"workload": workload, "requests": requests, "seed": seed,
                "tpot_slo_ms": tpot_slo, "timeout_s": timeout_s,
                "policy": policy if url is None else "server"}  # fmt: skip
    if block_tokens is not None:
        settings["block_tokens"] = block_tokens
    _requests(workload, rate or 1.0, 1, seed, tpot_slo, None)  # a bad workload fails here
    out.mkdir(parents=True, exist_ok=True)

    def measure(bench: _Bench) -> None:
        if not max_goodput:
            bench.run(rate, "run")
            return
        found = search_sequentially(lambda r: bench.run(r)["attainment"], bracket)
        doc = {"max_goodput": found.rate, "bound": found.bound, "probes": found.probes,
               "text": found.text(), **settings}  # fmt: skip
        (out / "max_goodput.json").write_text(json.dumps(doc, indent=2) + "\n")
        typer.echo(f"max goodput: {found.text()} req/s ({found.probes} runs)")

    if url is not None:
        url = loopback_url(url)
        model, limit = served_model(url)
        measure(_Bench(out, url, model, limit, None, 0.0, settings))
        return
    import sys

    from servecal.integrations.bench.server import (
        ServerSpec,
        running_server,
        table_dtype,
    )
    from servecal.profiler.model_folder import write_model_folder

    _check_server(table, policy)
    if dummy_model is not None:
        model_dir = write_model_folder(dummy_model, out / f"model-{Path(dummy_model).stem}")
        real_weights = False
    server_log = _next_free(out, "server-log")
    spec = ServerSpec(
        model_dir=model_dir, table=table.resolve(), tpot_slo_ms=tpot_slo, policy=policy,
        run_dir=server_log.resolve(), python=server_python or sys.executable,
        max_num_batched_tokens=max_num_batched_tokens, max_model_len=max_model_len,
        kv_cache_bytes=kv_cache_bytes, dummy_weights=not real_weights,
        enforce_eager=not compile_model,
        dtype=table_dtype(table), nice=nice, extra_args=tuple(server_arg),
        prefix_caching=prefix_caching, block_size=block_tokens,
    )  # fmt: skip
    settings["max_num_batched_tokens"] = max_num_batched_tokens
    settings["prefix_caching"] = prefix_caching
    typer.echo(f"starting vLLM ({policy}) on {model_dir} ...")
    with running_server(spec, out / f"{server_log.name}.txt") as served:
        model, limit = served_model(served)
        measure(_Bench(out, served, model, limit or max_model_len, server_log, spec.flush_s,
                       settings))  # fmt: skip
    typer.echo(f"server's own log: {server_log}")


def register(app: typer.Typer) -> None:
    app.command(
        "bench",
        help="Drive a real OpenAI-compatible server (or start vLLM with the plug-in) with a "
        "workload; a run folder per rate, --max-goodput on the real server.",
    )(bench_command)
