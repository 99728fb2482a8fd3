"""Table trust is one frozen value (``TableTrust``) handed from the CLI to every
loader: a run's spec carries it (so a worker process needs no environment), the run's
configuration does not include it, and no command writes it to ``os.environ``."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels.provenance import NO_TRUST, EditedTableError, TableTrust
from servecal.costmodels.samples import write_samples
from servecal.costmodels.synthetic import SyntheticTruth, grid_points
from servecal.sched import experiment as ex
from servecal.sched.experiment.models import load_predictor
from servecal.sched.policies.registry import PolicySpec

runner = CliRunner()
PROV = {"device_name": "simulated", "model": "analytic", "tp": 1}


@pytest.fixture(scope="module")
def edited(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A table fitted on samples that claim the simulated device, then edited."""
    root = tmp_path_factory.mktemp("trust")
    frame = SyntheticTruth().draw(grid_points([1, 8, 32], [0, 64, 256, 1024]), 10,
                                  np.random.default_rng(0))  # fmt: skip
    write_samples(frame, root / "samples.parquet", PROV)
    r = runner.invoke(app, ["fit", str(root / "samples.parquet"), "--out", str(root / "t.json")])
    assert r.exit_code == 0, r.output
    doc = json.loads((root / "t.json").read_text())
    doc["margin"]["rho"] *= 1.5  # hashed: the numbers no longer match content_hash
    (root / "edited.json").write_text(json.dumps(doc))
    return root / "edited.json"


def test_the_default_trusts_nothing() -> None:
    assert TableTrust() == NO_TRUST
    assert not NO_TRUST.allow_edited and NO_TRUST.refuse_mismatch
    assert not TableTrust(allow_mismatch=True).refuse_mismatch
    assert TableTrust(allow_mismatch=True, strict=True).refuse_mismatch
    with pytest.raises(AttributeError):
        NO_TRUST.allow_edited = True  # type: ignore[misc]


def test_a_run_spec_carries_trust_to_its_loader_but_not_into_its_config(edited: Path) -> None:
    base = ex.RunSpec(workload="chat", policy=PolicySpec("fixed-256"), tpot_slo_ms=50.0,
                      rate=5.0, n_requests=5, predictor=str(edited))  # fmt: skip
    trusting = ex.RunSpec(**{**base.__dict__, "trust": TableTrust(allow_edited=True)})
    assert pickle.loads(pickle.dumps(trusting)).trust == TableTrust(allow_edited=True)
    assert "trust" not in trusting.describe() and trusting.describe() == base.describe()
    with pytest.raises(EditedTableError):
        load_predictor(base.predictor, base.truth, base.trust)
    table = load_predictor(trusting.predictor, trusting.truth, trusting.trust)
    assert table.predict(1, 0) > 0


def test_the_cli_leaves_the_environment_alone(edited: Path, tmp_path: Path) -> None:
    before = {k: v for k, v in os.environ.items() if k.startswith("SERVECAL_")}
    args = ["simulate", "--workload", "chat", "--policy", "fixed-256", "--tpot-slo", "50",
            "--seeds", "2", "--jobs", "2", "--requests", "10", "--predictor", str(edited),
            "--out", str(tmp_path / "a")]  # fmt: skip
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "--allow-edited" in r.output, r.output
    r = runner.invoke(app, [*args, "--allow-edited"])
    assert r.exit_code == 0, r.output
    assert {k: v for k, v in os.environ.items() if k.startswith("SERVECAL_")} == before
    # the flag held for that command only
    r = runner.invoke(app, [*args[:-1], str(tmp_path / "b")])
    assert r.exit_code == 2 and "--allow-edited" in r.output
