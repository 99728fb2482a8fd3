"""Timing one iteration alone, in three segments: embed, layers, head.

On CUDA the clock records events between the segments and synchronises before and
after (so each iteration is timed alone, with no overlap from its neighbours); on
CPU, where kernels run synchronously, ``perf_counter_ns`` marks the boundaries.
Segments let the profiler time ``k`` of ``L`` layers and scale only the layer part.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from servecal.profiler.kv import IterationBatch
from servecal.profiler.model import Transformer


class CpuClock:
    """``perf_counter_ns`` at each mark; segment times in ms."""

    def __init__(self) -> None:
        self._ns: list[int] = []

    def start(self) -> None:
        self._ns = [time.perf_counter_ns()]

    def mark(self) -> None:
        self._ns.append(time.perf_counter_ns())

    def stop(self) -> list[float]:
        self.mark()
        return [(b - a) / 1e6 for a, b in zip(self._ns[:-1], self._ns[1:], strict=True)]


class CudaClock:
    """CUDA events at each mark, synchronised at start and stop; segment times in ms."""

    def __init__(self, device: torch.device, marks: int = 4) -> None:
        self.device = device
        self._events = [torch.cuda.Event(enable_timing=True) for _ in range(marks)]
        self._used = 0

    def start(self) -> None:
        torch.cuda.synchronize(self.device)
        self._used = 0
        self.mark()

    def mark(self) -> None:
        self._events[self._used].record()
        self._used += 1

    def stop(self) -> list[float]:
        self.mark()
        self._events[self._used - 1].synchronize()
        ev = self._events[: self._used]
        return [a.elapsed_time(b) for a, b in zip(ev[:-1], ev[1:], strict=True)]


def make_clock(device: torch.device) -> CpuClock | CudaClock:
    return CudaClock(device) if device.type == "cuda" else CpuClock()


@dataclass(frozen=True)
class LayerScale:
    """``timed`` of the shape's ``total`` layers run; the layer segment is scaled by total/timed."""

    timed: int
    total: int

    def __post_init__(self) -> None:
        if not 1 <= self.timed <= self.total:
            raise ValueError(f"layers timed must be in [1, {self.total}], got {self.timed}")

    @property
    def factor(self) -> float:
        return self.total / self.timed

    def estimate(self, segments: list[float]) -> float:
        """Whole-model iteration time from (embed, layers, head) segment times."""
        embed, layers, head = segments
        return embed + layers * self.factor + head


def timed_iteration(
    model: Transformer,
    batch: IterationBatch,
    tokens: torch.Tensor,
    clock: CpuClock | CudaClock,
) -> list[float]:
    """Run one iteration; return its (embed, layers, head) segment times in ms."""
    with torch.inference_mode():
        clock.start()
        ictx = model.prepare(batch)
        x = model.embed(tokens)
        clock.mark()
        x = model.run_layers(x, batch, ictx)
        clock.mark()
        model.head(x, ictx)
        return clock.stop()
