"""``running_server`` stops the server it started when its own process is terminated.

The server runs in a session of its own, so nothing but us stops it; a SIGTERM to the
bench (a job scheduler's, ``timeout``'s, a CI cancel) must not leave it serving. A
fake ``vllm.entrypoints.openai.api_server`` (an HTTP server answering ``/v1/models``)
stands in for vLLM: no engine needed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

FAKE_API_SERVER = """
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"data": []}')

    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""

DRIVER = """
import os, sys, time
from pathlib import Path
from servecal.integrations.bench.server import ServerSpec, running_server

folder = Path(sys.argv[1])
spec = ServerSpec(folder / "model", folder / "table.json", 50.0)
with running_server(spec, folder / "server.txt", start_timeout_s=60) as url:
    (folder / "url").write_text(url)
    time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie has exited: it only waits to be reaped by its parent
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


def _server_pid(port: str) -> int | None:
    """The pid of the fake server listening on ``port`` (its command line names it)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"vllm.entrypoints.openai.api_server" in cmd and port.encode() in cmd:
            return int(proc.name)
    return None


def test_a_terminated_bench_stops_its_server(tmp_path: Path) -> None:
    fake = tmp_path / "fake" / "vllm" / "entrypoints" / "openai"
    fake.mkdir(parents=True)
    for package in (fake.parents[1], fake.parent, fake):
        (package / "__init__.py").write_text("")
    (fake / "api_server.py").write_text(textwrap.dedent(FAKE_API_SERVER))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "fake"), *sys.path]))
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path)], env=env)
    try:
        for _ in range(600):  # up to a minute of 0.1 s polls: the fake starts in ~1 s
            if (tmp_path / "url").exists():
                break
            assert driver.poll() is None, (tmp_path / "server.txt").read_text()
            time.sleep(0.1)
        else:
            raise AssertionError("the fake server never answered")
        port = (tmp_path / "url").read_text().rsplit(":", 1)[1]
        pid = _server_pid(port)
        assert pid is not None and _alive(pid)

        driver.send_signal(signal.SIGTERM)
        code = driver.wait(timeout=60)
        assert not _alive(pid), "the server outlived the bench that started it"
        assert code == 128 + signal.SIGTERM  # an exit, with the shell's code for it
    finally:
        if driver.poll() is None:
            driver.kill()
        pid = _server_pid(port) if (tmp_path / "url").exists() else None
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
