"""Tensor parallelism over NCCL on two GPUs (skipped without them): the same code as gloo."""

import json

import pytest
import torch
import torch.multiprocessing as mp
from tpworker import check_equivalence

from servecal.costmodels.samples import read_samples
from servecal.profiler.calibrate import CalibrateConfig, calibrate

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices"),
]


def test_tp2_forward_over_nccl_equals_the_tp1_forward(tmp_path):
    mp.spawn(check_equivalence, args=(2, str(tmp_path / "store"), "nccl"), nprocs=2, join=True)


def test_calibrate_tp2_over_nccl_times_rank0_with_its_allreduces(tmp_path):
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"n_decode": [0, 16, 64], "chunk": [0, 256], "ctx": [512],
                                "prefix": [0]}))  # fmt: skip
    cfg = CalibrateConfig(out=tmp_path / "run", device="cuda:0", model="llama-3-8b", layers=2,
                          grid=str(grid), repeats=10, tp=2, fit=False)  # fmt: skip
    result = calibrate(cfg)
    samples = read_samples(result.samples_path)
    assert len(samples.frame) == 5 * 10 and (samples.frame.ms > 0).all()
    fp = samples.provenance
    assert fp["tp"] == 2 and fp["collective_backend"] == "nccl" and fp["nccl_version"]
    assert fp["energy_source"] is None or "sum of 2 GPUs" in fp["energy_source"]
