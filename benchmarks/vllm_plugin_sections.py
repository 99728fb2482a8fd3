"""Where the SLOWeave plug-in's ``schedule()`` time goes, section by section, in place.

``benchmarks/vllm_plugin.py`` measures the plug-in's added time as a whole; this
script splits it. The plug-in's ``schedule()`` and the cost table's ``max_chunk``
are recompiled from their own source with a ``perf_counter_ns`` stamp before each
statement listed in :data:`SCHEDULE_MARKS` / :data:`MAX_CHUNK_MARKS` (a mark whose
line is no longer in the source is reported, not silently skipped), and stepped
beside the stock scheduler, one step each in turn, as ``vllm_plugin.py`` does by
default (``--block N``: N steps in a row). Prints the median µs between
consecutive stamps. Each stamp costs ~0.1-0.3 µs itself, so the sections add up to
a little more than the plug-in's added time; what the split is for is the shares.
Needs vLLM (docs/vllm.md)::

    python benchmarks/vllm_plugin_sections.py [--steps 600] [--block 1]
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import tempfile
import textwrap
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import vllm_plugin as bench  # noqa: E402 - sets VLLM_TARGET_DEVICE before vLLM loads

VLLM = "vLLM's own schedule()"
#: schedule(): a stamp before each of these statements (its source line, stripped),
#: named for the section it starts (up to the next stamp).
SCHEDULE_MARKS = {
    "if self._sw_control is not None:  # 1": "margin controller (settle)",
    "running = self.running  # 2": "KV sum (kept), context, next prompt",
    "plan = self._sw_plan(start, n, ctx, prompts)  # 3": "due time, plan_chunk, deadline_chunk",
    # vLLM's section includes the kept KV sum's update after it (one addition, usually)
    "# the decision's own time, for the run folder (on the plug-in's clock)": VLLM,
    "if out.total_num_scheduled_tokens <= 0:": "what vLLM scheduled (record)",
    "if self._sw_async:  # the next step is planned before this one's tokens exist": "keep, return",
}
#: CostTable.max_chunk: the same, inside the decision.
MAX_CHUNK_MARKS = {
    "bound = self._bounds.get((q, use_margin)) or self._bound(q, use_margin)": (
        "max_chunk: the mode's grids"
    ),
    # the compiled search, then back through deadline_chunk, plan_chunk
    "return self._largest_fitting_chunk(": "max_chunk: compiled search, and back",
}
STAMPS: list[tuple[str, int]] = []


def stamped(function: Any, marks: dict[str, str], name: str) -> Any:
    """``function`` recompiled from its source with a stamp before each marked line."""
    lines, found = [], set()
    for line in inspect.getsource(function).split("\n"):
        key = line.strip()
        if key in marks and key not in found:
            found.add(key)
            indent = line[: len(line) - len(line.lstrip())]
            lines.append(f"{indent}_STAMPS.append(({marks[key]!r}, _clock()))")
        lines.append(line)
    for key in marks.keys() - found:
        print(f"warning: mark not found in {name}: {key!r}")
    code = textwrap.dedent("\n".join(lines)).replace("super().", "super(_CLS, self).")
    namespace = dict(function.__globals__)
    namespace.update(_STAMPS=STAMPS, _clock=time.perf_counter_ns, _CLS=_owner(function))
    exec(compile(code, f"<stamped {name}>", "exec"), namespace)  # noqa: S102
    return namespace[function.__name__]


def _owner(function: Any) -> Any:
    module = sys.modules[function.__module__]
    return getattr(module, function.__qualname__.split(".")[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--block", type=int, default=1)
    parser.add_argument("--running", type=int, default=256)
    args = parser.parse_args()
    from servecal.costmodels.table import CostTable
    from servecal.integrations.vllm.scheduler import SLOWeaveScheduler

    plain = SLOWeaveScheduler.schedule

    def schedule(self: Any, *a: Any, **kw: Any) -> Any:
        STAMPS.clear()
        STAMPS.append(("entry, running requests read", time.perf_counter_ns()))
        out = inner(self, *a, **kw)
        STAMPS.append(("return", time.perf_counter_ns()))
        SECTIONS.append(list(STAMPS))
        return out

    inner = stamped(plain, SCHEDULE_MARKS, "schedule")
    SLOWeaveScheduler.schedule = schedule
    CostTable.max_chunk = stamped(CostTable.max_chunk, MAX_CHUNK_MARKS, "max_chunk")
    SECTIONS: list[list[tuple[str, int]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "model").mkdir()
        (root / "model" / "config.json").write_text(json.dumps(bench.MODEL))
        bench.table(root / "table.json")
        settings = {"table": str(root / "table.json"), "tpot_slo_ms": 30.0, "check_model": False}
        plugin = bench.Driver(bench.build(root / "model", bench.PLUGIN, settings), args.running,
                              12_000)  # fmt: skip
        stock = bench.Driver(bench.build(root / "model", None, None), args.running, 12_000)
        for k in range(0, args.warmup + args.steps, args.block):
            if k < args.warmup:
                SECTIONS.clear()
            for d in [plugin] * args.block + [stock] * args.block:
                out = d.s.schedule()
                d.s.update_from_output(out, d.output(out))
                d.refill()
    spans: dict[str, list[float]] = defaultdict(list)
    for stamps in SECTIONS:
        for (label, t0), (_, t1) in zip(stamps, stamps[1:], strict=False):
            spans[label].append((t1 - t0) / 1000.0)
        whole = (stamps[-1][1] - stamps[0][1]) / 1000.0
        spans["the plug-in's own (whole call less vLLM's)"].append(whole - spans[VLLM][-1])
    print(f"{len(SECTIONS)} plug-in steps ({args.block} in a row), median µs from each stamp "
          "to the next (wall clock)")  # fmt: skip
    for label, values in spans.items():
        share = len(values) / len(SECTIONS)
        note = f"  ({share:.0%} of steps)" if share < 0.99 else ""
        print(f"  {label:44s} {statistics.median(values):8.1f}{note}")


if __name__ == "__main__":
    main()
