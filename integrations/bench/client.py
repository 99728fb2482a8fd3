"""Send a workload to an OpenAI-compatible ``/v1/completions`` endpoint and time its tokens.

Each request is sent at its arrival time (ms after the bench starts), streaming,
with ``max_tokens`` = its output length and ``ignore_eos`` (so it produces exactly
that many tokens, as the simulator assumes), its prompt as token ids (no tokenizer
needed on either side; a request with prefix identity sends its blocks' tokens, so
shared prefixes are shared token for token: :mod:`.prompts`), and its SLOs in
``vllm_xargs`` (the servecal plug-in plans on a request's own ``tpot_slo_ms``).
``return_token_ids`` makes every streamed chunk say how many tokens it carries, so
coalesced chunks are counted right.

A request that errors, or has not finished when the bench's deadline passes, is
kept with what it received and its error: it counts as missed, never dropped.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import math
import re
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

from servecal.integrations.bench.prompts import PROMPT_IDS, prompt_ids
from servecal.sched.request import Request
from servecal.util.errors import InputError

__all__ = ["ID_PREFIX", "PROMPT_IDS", "Received", "prompt_ids", "rid_of", "send_workload",
           "served_model"]  # fmt: skip

#: Each request goes out with ``X-Request-Id: ID_PREFIX-RID`` (vLLM names the request
#: after it, so the plug-in's run log can be joined to the client's rows: :func:`rid_of`).
ID_PREFIX = "servecal"


@dataclass
class Received:
    """What the client saw of one request (times in ms after the bench's start)."""

    request: Request
    origin_s: float = math.nan  # the bench's 0 ms on time.perf_counter()
    sent_ms: float = math.nan
    token_ms: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def complete(self) -> bool:
        return self.error is None and len(self.token_ms) >= self.request.output_tokens


def loopback_url(url: str) -> str:
    """``url`` without a trailing slash; anything but a loopback http(s) host is refused."""
    parsed = urlparse(url)
    host = parsed.hostname or ""
    if parsed.scheme not in ("http", "https") or not host:
        raise InputError(f"--url {url!r}: expected http://HOST:PORT")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise InputError(
            f"--url {url!r}: the bench drives loopback servers only (127.0.0.1, ::1, "
            "localhost): run it on the server's host"
        )
    return url.rstrip("/")


def rid_of(server_request_id: str, id_prefix: str = ID_PREFIX) -> int | None:
    """The bench's ``rid`` of a request sent with ``X-Request-Id: PREFIX-RID``, from the
    name the server gave it (vLLM: ``cmpl-PREFIX-RID-0-xxxxxxxx``); None for any other."""
    found = re.search(rf"(?:^|-){re.escape(id_prefix)}-(\d+)(?:-|$)", server_request_id)
    return int(found.group(1)) if found else None


def _body(model: str, req: Request, prompt: list[int]) -> dict:
    xargs = {
        key: value
        for key, value in (("tpot_slo_ms", req.tpot_slo_ms), ("ttft_slo_ms", req.ttft_slo_ms))
        if math.isfinite(value)
    }
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": req.output_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "return_token_ids": True,
    }
    if xargs:
        body["vllm_xargs"] = xargs
    return body


def _tokens_in(chunk: dict) -> int:
    """Tokens one streamed chunk carries (its ``token_ids``, else 1 per text piece)."""
    choices = chunk.get("choices") or []
    if not choices:
        return 0
    ids = choices[0].get("token_ids")
    if ids is not None:
        return len(ids)
    return 1 if choices[0].get("text") else 0


async def _send(session, url: str, model: str, got: Received, prompt: list[int], t0: float,
                id_prefix: str) -> None:  # noqa: ANN001  # fmt: skip
    now_ms = lambda: (time.perf_counter() - t0) * 1000.0  # noqa: E731
    delay = got.request.arrival_ms - now_ms()
    if delay > 0:
        await asyncio.sleep(delay / 1000.0)
    got.origin_s = t0
    got.sent_ms = now_ms()
    try:
        async with session.post(
            f"{url}/v1/completions",
            json=_body(model, got.request, prompt),
            headers={"X-Request-Id": f"{id_prefix}-{got.request.rid}"},
        ) as r:
            if r.status != 200:
                got.error = f"HTTP {r.status}: {(await r.text())[:200]}"
                return
            async for raw in r.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                n = _tokens_in(json.loads(data))
                if n:
                    stamp = now_ms()
                    got.token_ms.extend([stamp] * n)
    except asyncio.CancelledError:
        got.error = "not finished by the bench's deadline"
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of one request is that request's
        got.error = f"{type(exc).__name__}: {exc}"[:200]
    if got.error is None and len(got.token_ms) < got.request.output_tokens:
        got.error = f"stream ended after {len(got.token_ms)} of {got.request.output_tokens} tokens"


async def _drive(url: str, model: str, requests: list[Request], prompts: list[list[int]],
                 deadline_s: float, id_prefix: str = ID_PREFIX) -> list[Received]:  # fmt: skip
    import aiohttp

    received = [Received(r) for r in requests]
    # one connection per request in flight, never reused: a pooled keep-alive
    # connection that the server closes as the next request goes out on it fails that
    # request with "Server disconnected" (seen on a loaded host), which is the
    # client's race, not the server's miss
    limits = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    async with aiohttp.ClientSession(connector=limits, timeout=timeout) as session:
        t0 = time.perf_counter()
        tasks = [
            asyncio.ensure_future(_send(session, url, model, got, prompt, t0, id_prefix))
            for got, prompt in zip(received, prompts, strict=True)
        ]
        # counted from the last request's due time, not from the start: at a low rate
        # the last requests are sent late, and a deadline from the start would cut them
        # before they are sent (a miss that grows as the rate falls, against the
        # monotonicity a max-goodput search assumes)
        last_due_s = max((r.arrival_ms for r in requests), default=0.0) / 1000.0
        done, pending = await asyncio.wait(tasks, timeout=last_due_s + deadline_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    for got in received:  # cancelled before it was even sent
        if math.isnan(got.sent_ms) and got.error is None:
            got.error = "not sent by the bench's deadline"
    return received


def send_workload(url: str, model: str, requests: list[Request], seed: int,
                  deadline_s: float, id_prefix: str = ID_PREFIX) -> list[Received]:  # fmt: skip
    """Send ``requests`` to ``url`` at their arrival times; every request comes back,
    complete, failed or cut off ``deadline_s`` after the last one was due. Prompts are token
    ids (:mod:`.prompts`: realising the requests' shared prefixes where they carry
    prefix identity); each request's ``X-Request-Id`` is ``id_prefix-RID``."""
    prompts = prompt_ids(requests, seed)
    return asyncio.run(_drive(url, model, requests, prompts, deadline_s, id_prefix))


def served_model(url: str, timeout_s: float = 10.0) -> tuple[str, int | None]:
    """The model a server serves (its first) and its ``max_model_len`` if it says."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=timeout_s) as r:
            doc = json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise InputError(f"{url}: no OpenAI-compatible server answers ({exc})") from None
    models = doc.get("data") or []
    if not models:
        raise InputError(f"{url}/v1/models lists no model")
    return str(models[0]["id"]), models[0].get("max_model_len")
