"""Whether an exception says the device (or host) ran out of memory."""

from __future__ import annotations

import torch


def is_out_of_memory(exc: BaseException) -> bool:
    """numpy's ``_ArrayMemoryError`` (a ``MemoryError``), torch's CUDA
    ``OutOfMemoryError``, or the CPU allocator's ``RuntimeError``."""
    if isinstance(exc, MemoryError):
        return True
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text
    )
