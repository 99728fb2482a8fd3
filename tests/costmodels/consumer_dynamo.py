"""NVIDIA Dynamo's mocker reading a ``perf_data.npz``, re-implemented from its source
for machines without ``ai-dynamo`` (not a test module).

Follows ``PerfModel::from_npz``, ``predict_prefill_time`` and ``predict_decode_time``
of the mocker's ``lib/mocker/src/common/perf_model.rs`` (ai-dynamo 1.6.1, the code its
``ai-dynamo-runtime`` wheel runs: ``dynamo_mocker::common::perf_model``): the five
arrays by name, the prefill a linear interpolation of ``prefill_ttft_ms`` over
``prefill_isl`` in the batch's new tokens (``ndarray_interp`` ``Linear`` with
``extrapolate(true)``), at least 0; the decode a bilinear interpolation of
``decode_itl[kv, ctx]`` over ``(decode_active_kv_tokens, decode_context_length)``
(``Bilinear`` with ``extrapolate(true)``), at least 1 ms. The mocker's own Python check
(``is_mocker_format_npz``) wants a ``.npz`` file holding the five names.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

KEYS = ("prefill_isl", "prefill_ttft_ms", "decode_active_kv_tokens", "decode_context_length",
        "decode_itl")  # fmt: skip


class MockerModel:
    """The mocker's ``PerfModel::Interpolated`` of one NPZ file."""

    def __init__(self, path: Path) -> None:
        assert path.suffix == ".npz", "is_mocker_format_npz: a .npz file"
        with np.load(path) as data:
            assert set(KEYS) <= set(data.keys()), sorted(data.keys())
            arrays = {k: np.asarray(data[k], dtype=np.float64) for k in KEYS}
        self.isl, self.ttft = arrays["prefill_isl"], arrays["prefill_ttft_ms"]
        self.kv, self.ctx = arrays["decode_active_kv_tokens"], arrays["decode_context_length"]
        self.itl = arrays["decode_itl"]
        assert self.isl.ndim == self.ttft.ndim == 1 and self.isl.size == self.ttft.size
        assert self.itl.shape == (self.kv.size, self.ctx.size), "itl shape = (kv, ctx)"
        for axis in (self.isl, self.kv, self.ctx):  # ndarray_interp: strictly rising axes
            assert axis.size >= 2 and (np.diff(axis) > 0).all()

    def prefill_ms(self, batch: int, isl: int, prefix: int = 0) -> float:
        new = max(isl - prefix, 0)
        if batch == 0 or new == 0:
            return 0.0
        return max(_linear(self.isl, self.ttft, float(batch * new)), 0.0)

    def decode_ms(self, batch: int, active_kv_tokens: float, context_length: float) -> float:
        if batch == 0:
            return 0.0
        return max(_bilinear(self.kv, self.ctx, self.itl, active_kv_tokens, context_length), 1.0)


def _segment(axis: np.ndarray, x: float) -> tuple[int, float]:
    """The segment ``[i, i + 1]`` of ``axis`` holding ``x`` (the first or last beyond
    the ends: extrapolation) and ``x``'s weight along it."""
    i = int(np.clip(np.searchsorted(axis, x, side="right") - 1, 0, axis.size - 2))
    return i, (x - axis[i]) / (axis[i + 1] - axis[i])


def _linear(x: np.ndarray, y: np.ndarray, at: float) -> float:
    i, w = _segment(x, at)
    return float(y[i] + w * (y[i + 1] - y[i]))


def _bilinear(x: np.ndarray, y: np.ndarray, z: np.ndarray, at_x: float, at_y: float) -> float:
    i, wx = _segment(x, at_x)
    j, wy = _segment(y, at_y)
    low = z[i, j] + wx * (z[i + 1, j] - z[i, j])
    high = z[i, j + 1] + wx * (z[i + 1, j + 1] - z[i, j + 1])
    return float(low + wy * (high - low))
