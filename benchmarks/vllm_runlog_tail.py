"""What the run log's tail costs the serving loop: one ``write()`` per step and a row
per finished request, against the same log with its tails switched off.

Both variants log the same synthetic traffic (``--running`` requests decoding, one
arriving and prefilling every 7 steps, each decoding 200 steps), in alternating
rounds of ``--steps`` steps, so the host's drift falls on both alike. The serving
loop's own time per step is printed for each round and variant, then the median per
step of each and their ratio. No vLLM needed::

    python benchmarks/vllm_runlog_tail.py [--steps 20000] [--rounds 6]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "costmodels"))
from tablefactory import small_table  # noqa: E402

from servecal.integrations.vllm.runlog import RunLog  # noqa: E402


class _NoTail:
    """A tail that writes nothing (the log as it was before the tail)."""

    def append_floats(self, values: object) -> None:
        pass

    def append_row(self, row: object) -> None:
        pass

    def rotate(self) -> Path:
        return Path("/nonexistent/servecal-no-tail")

    def close(self, remove: bool) -> None:
        pass


def serve(log: RunLog, steps: int, running: int) -> float:
    """Seconds the loop spent in the log's calls over ``steps`` steps."""
    live: list[tuple[str, int]] = []
    now = 0.0
    spent = 0.0
    for k in range(steps):
        t0 = time.perf_counter()
        chunk = 0
        rid = None
        if len(live) < running and k % 7 == 0:
            rid = f"r{k}"
            log.arrived(rid, now, 128, 200, 500.0, 25.0)
            chunk = 128
        row = [now, 2.0, len(live), chunk, 1 if chunk else 0, 300.0, 0.0, 5.0, 20.0, chunk,
               len(live) + chunk, 2.0]  # fmt: skip
        index = log.step(row)
        if rid is not None:
            log.started(rid, index)
            live.append((rid, index))
        for r, first in list(live):
            if index - first >= 200:
                log.finished(r, now + 2.0, index, 200)
                live.remove((r, first))
        spent += time.perf_counter() - t0
        now += 2.5
        if k % 100 == 99:
            time.sleep(0.001)  # a serving loop waits on the device: the writer runs
    return spent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--running", type=int, default=32)
    args = ap.parse_args()
    if args.steps < 100 or args.rounds < 1 or args.running < 1:
        print("error: need --steps >= 100, --rounds >= 1, --running >= 1", file=sys.stderr)
        return 2
    per_step: dict[str, list[float]] = {"tail": [], "no tail": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = ("tail", "no tail") if r % 2 == 0 else ("no tail", "tail")
            for variant in order:
                log = RunLog(Path(tmp) / f"{r}-{variant}", small_table(), {"policy": "bench"},
                             flush_every=1000, flush_s=5.0)  # fmt: skip
                if variant == "no tail":
                    for tail in (log._step_tail, log._request_tail):
                        tail.close(remove=True)
                    log._step_tail = log._request_tail = _NoTail()  # type: ignore[assignment]
                us = serve(log, args.steps, args.running) / args.steps * 1e6
                log.close()
                per_step[variant].append(us)
                print(f"round {r} {variant:8s} {us:6.2f} us/step", flush=True)
    tail = statistics.median(per_step["tail"])
    plain = statistics.median(per_step["no tail"])
    print(f"median: tail {tail:.2f} us/step, no tail {plain:.2f} us/step, "
          f"added {tail - plain:.2f} us/step ({tail / plain:.2f}x)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
