"""Two TPOT classes on one engine (issue 43, item 2): the ``twoclass`` workload, and
SLOWeave sizing each chunk to the deadlines actually in the batch."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from servecal.sched import experiment as ex
from servecal.sched.policies.registry import PolicySpec
from servecal.sched.workloads import WORKLOADS, generate


def test_twoclass_is_a_tight_minority_and_a_lenient_rest() -> None:
    reqs = generate("twoclass", 20.0, n_requests=20_000, tpot_slo_ms=25.0,
                    rng=np.random.default_rng(3))  # fmt: skip
    f = pd.DataFrame([r.__dict__ for r in reqs])
    shares = f["tpot_slo_ms"].value_counts(normalize=True).to_dict()
    assert set(shares) == {10.0, 50.0}
    assert shares[10.0] == pytest.approx(0.2, abs=0.01)
    # the class is drawn independently of the lengths: mixed's long share in both
    long = f["slo_class"].str.startswith("long")
    for slo in (10.0, 50.0):
        assert long[f["tpot_slo_ms"] == slo].mean() == pytest.approx(0.2, abs=0.02)
    assert WORKLOADS["twoclass"].arrivals == WORKLOADS["mixed"].arrivals


def test_sloweave_chunks_are_smaller_when_a_tight_request_is_decoding() -> None:
    # a light load, so that some prefills find no tight (10 ms) request decoding: those
    # are planned against a lenient (50 ms) deadline and take larger chunks
    spec = ex.RunSpec("twoclass", PolicySpec.parse("sloweave", {}), 25.0, 1.0,
                      n_requests=200).at_rate(4.0)  # fmt: skip
    run = ex.run(spec, 0)
    it = run.iterations
    chunk = np.asarray(it["chunk"], dtype=float)
    budget = np.asarray(it["budget_ms"], dtype=float)
    # a budget cut the chunk below the whole prompt: the decision the deadline made
    planned = (chunk > 0) & np.isfinite(budget)
    tight = planned & (budget <= 10.0)
    lenient = planned & (budget > 10.0)
    assert tight.sum() >= 20 and lenient.sum() >= 20
    assert chunk[tight].mean() < chunk[lenient].mean()
    assert np.percentile(chunk[tight], 90) < np.percentile(chunk[lenient], 90)
    summary = ex.summarize(spec, run)
    assert summary["by_tpot_slo"]["10"]["tpot_attainment"] >= 0.9
