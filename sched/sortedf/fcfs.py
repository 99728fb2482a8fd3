"""FCFS with a memory watermark and evict-and-restart, as vLLM runs it.

At each boundary, waiting requests are admitted in arrival order (index order;
evicted ones go back to the front) while the memory of the next step, with the
newcomer, stays ``<= (1 - α)·M``; the first that does not fit stops admission.
When the running requests' growth would push a step above ``M``, the most
recently admitted request is evicted (vLLM's recompute preemption pops the tail
of its running queue) until the step fits; its KV and progress are lost and it
restarts from its prefill later. With nothing running the head is admitted even
above the watermark, or it would wait forever.

Event-driven: with a fixed running set the memory of step ``t`` is ``A + k·t``, so
the next overflow and the next completion are computed, not stepped to.
"""

from __future__ import annotations

from collections import deque

from servecal.sched.sortedf.model import Instance, Segments


def run_fcfs(inst: Instance, alpha: float = 0.1) -> Segments:
    """Segments of the FCFS schedule with watermark ``(1 - alpha)·M``."""
    if not 0.0 <= alpha < 1.0:
        raise ValueError("alpha must be in [0, 1)")
    s = inst.s.tolist()
    o = inst.o.tolist()
    memory = inst.memory
    watermark = (1.0 - alpha) * memory
    waiting: deque[int] = deque(range(inst.n))
    running: list[tuple[int, int]] = []  # (rid, start) in admission order
    seg_rid: list[int] = []
    seg_start: list[int] = []
    seg_len: list[int] = []
    seg_done: list[bool] = []
    tau = 0
    base = 0  # Σ (s_i - S_i) over running: step t uses base + t·len(running)
    while waiting or running:
        while waiting:
            i = waiting[0]
            need = base + (tau + 1) * len(running) + s[i] + 1
            if running and need > watermark:
                break
            waiting.popleft()
            running.append((i, tau))
            base += s[i] - tau
        k = len(running)
        next_end = min(start + o[rid] for rid, start in running)
        # First step t > tau with base + k·t > M (k >= 1 here).
        overflow = (memory - base) // k + 1
        if overflow <= next_end:
            tau = overflow - 1
            while base + (tau + 1) * len(running) > memory:
                rid, start = running.pop()
                base -= s[rid] - start
                seg_rid.append(rid)
                seg_start.append(start)
                seg_len.append(tau - start)
                seg_done.append(False)
                waiting.appendleft(rid)
            continue
        tau = next_end
        still = []
        for rid, start in running:
            if start + o[rid] == tau:
                seg_rid.append(rid)
                seg_start.append(start)
                seg_len.append(o[rid])
                seg_done.append(True)
                base -= s[rid] - start
            else:
                still.append((rid, start))
        running = still
    return Segments.from_lists(seg_rid, seg_start, seg_len, seg_done)
