"""The collectives a tensor-parallel forward pass calls, behind one small interface.

:class:`SingleDevice` (TP 1) does nothing; :class:`ProcessGroupCollective` runs
``torch.distributed`` over a process group: NCCL between GPUs, gloo between CPU
processes. The model code is the same for both, so the CPU path tested in CI is
the one a GPU runs with the backend and the device switched.
"""

from __future__ import annotations

from typing import Protocol

import torch


class Collective(Protocol):
    """What a model shard needs from its tensor-parallel group."""

    rank: int
    size: int
    backend: str | None

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum ``x`` over the ranks, in place; return it."""
        ...

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        """``[rows, cols]`` per rank → ``[rows, size · cols]`` (rank 0's columns first)."""
        ...


class SingleDevice:
    """TP 1: the whole model on one device, nothing to exchange."""

    rank = 0
    size = 1
    backend = None

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        return x


SINGLE_DEVICE = SingleDevice()


class ProcessGroupCollective:
    """``torch.distributed`` collectives over ``group`` (default: the world)."""

    def __init__(self, group: object | None = None) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.backend = str(dist.get_backend(group))
        # all_gather_single is the newer name (torch >= 2.13) of all_gather_into_tensor
        self._gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        # Synchronous: on CUDA, NCCL enqueues the reduction on the current stream's
        # order, so the rank-0 clock's events include it.
        self._dist.all_reduce(x, group=self.group)
        return x

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        # One flat gather (a single NCCL kernel), then ranks' column blocks side by side.
        rows, cols = x.shape
        out = torch.empty((self.size * rows, cols), dtype=x.dtype, device=x.device)
        self._gather(out, x.contiguous(), group=self.group)
        return out.view(self.size, rows, cols).permute(1, 0, 2).reshape(rows, self.size * cols)
