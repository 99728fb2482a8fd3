"""Named SLO classes: the multislo workload and stamping its classes onto a trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from servecal.sched.metrics import summarize, summarize_by_class
from servecal.sched.workloads import WORKLOADS, generate, load_trace
from servecal.sched.workloads.classes import class_probabilities
from servecal.util.errors import InputError

AZURE = Path(__file__).resolve().parents[1] / "data" / "azure_conv_head200.csv"

# FlowPrefill (docs/spec.md §3): TTFT s, TBT s, share %, mean input tokens.
FLOWPREFILL = {
    "text": (0.25, 0.1, 69, 646),
    "image": (0.5, 0.1, 7, 393),
    "search": (4.0, 0.2, 20, 5055),
    "file": (6.0, 0.2, 3, 4132),
}


def _frame(reqs) -> pd.DataFrame:
    return pd.DataFrame([r.__dict__ for r in reqs])


def test_multislo_is_one_catalogue_entry_with_flowprefill_numbers() -> None:
    spec = WORKLOADS["multislo"]
    assert [c.name for c in spec.classes] == list(FLOWPREFILL)
    probs = class_probabilities(spec.classes)
    np.testing.assert_allclose(probs, np.array([69, 7, 20, 3]) / 99)
    for cls in spec.classes:
        ttft_s, tbt_s, _, mean_in = FLOWPREFILL[cls.name]
        assert cls.ttft.base_ms == ttft_s * 1000 and cls.ttft.per_token_ms == 0
        assert cls.tpot_slo_ms == tbt_s * 1000
        assert cls.prompt.mean == pytest.approx(mean_in)


def test_multislo_draws_match_shares_means_and_slos() -> None:
    f = _frame(
        generate(
            "multislo", 20.0, n_requests=30000, tpot_slo_ms=25.0, rng=np.random.default_rng(11)
        )
    )
    for name, (ttft_s, tbt_s, share, mean_in) in FLOWPREFILL.items():
        rows = f[f.slo_class == name]
        assert abs(len(rows) / len(f) - share / 99) < 0.01
        assert abs(rows.prompt_tokens.mean() - mean_in) / mean_in < 0.06
        assert (rows.ttft_slo_ms == ttft_s * 1000).all()
        # The class's own TBT wins over the run's --tpot-slo.
        assert (rows.tpot_slo_ms == tbt_s * 1000).all()
    assert (f.prompt_tokens + f.output_tokens <= WORKLOADS["multislo"].context_limit).all()


def test_multislo_classes_stamped_on_a_trace_keep_its_lengths() -> None:
    plain = load_trace(AZURE, 5.0, 25.0, None, np.random.default_rng(0))
    stamped = load_trace(AZURE, 5.0, 25.0, None, np.random.default_rng(0), slo_classes="multislo")
    assert [(r.prompt_tokens, r.output_tokens, r.arrival_ms) for r in stamped] == [
        (r.prompt_tokens, r.output_tokens, r.arrival_ms) for r in plain
    ]
    f = _frame(stamped)
    assert set(f.slo_class) <= set(FLOWPREFILL) and f.slo_class.nunique() >= 3
    for name, (ttft_s, tbt_s, _, _) in FLOWPREFILL.items():
        rows = f[f.slo_class == name]
        assert (rows.ttft_slo_ms == ttft_s * 1000).all()
        assert (rows.tpot_slo_ms == tbt_s * 1000).all()
    via_generate = generate(
        f"trace:{AZURE}",
        5.0,
        tpot_slo_ms=25.0,
        rng=np.random.default_rng(0),
        slo_classes="multislo",
    )
    assert via_generate == stamped


def test_slo_classes_errors() -> None:
    with pytest.raises(InputError, match="unknown SLO class set 'nope'"):
        load_trace(AZURE, 5.0, 25.0, None, np.random.default_rng(0), slo_classes="nope")
    with pytest.raises(InputError, match="trace:PATH"):
        generate(
            "chat",
            5.0,
            n_requests=5,
            tpot_slo_ms=25.0,
            rng=np.random.default_rng(0),
            slo_classes="multislo",
        )


def test_summarize_by_class_splits_goodput() -> None:
    rows = []
    # Two text requests (one meets 250 ms TTFT, one does not) and one search request.
    for rid, (cls, ttft, slo) in enumerate(
        [("text", 100.0, 250.0), ("text", 300.0, 250.0), ("search", 3000.0, 4000.0)]
    ):
        rows.append(
            dict(
                rid=rid,
                arrival_ms=0.0,
                prompt_tokens=10,
                output_tokens=3,
                ttft_slo_ms=slo,
                tpot_slo_ms=100.0,
                slo_class=cls,
                first_token_ms=ttft,
                completion_ms=4000.0,
                tokens_out=3,
                tpot_p99_ms=50.0,
                recomputes=0,
                parks=0,
            )
        )
    frame = pd.DataFrame(rows)
    by = summarize_by_class(frame)
    assert by["text"]["requests"] == 2 and by["text"]["attainment"] == 0.5
    assert by["search"]["attainment"] == 1.0
    assert by["text"]["goodput"] + by["search"]["goodput"] == pytest.approx(
        summarize(frame)["goodput"]
    )
    assert by["search"]["goodput"] == pytest.approx(1 / 4.0)
    assert summarize(frame)["by_class"] == by
    assert "by_class" not in summarize(frame[frame.slo_class == "text"])


def test_by_class_averages_over_seeds() -> None:
    from servecal.sched.metrics import mean_over_seeds

    a = {"goodput": 1.0, "by_class": {"text": {"goodput": 1.0}, "file": {"goodput": 2.0}}}
    b = {"goodput": 3.0, "by_class": {"text": {"goodput": 3.0}}}
    m = mean_over_seeds([a, b])
    assert m["by_class"]["text"]["goodput"] == 2.0
    assert m["by_class"]["file"]["goodput"] == 2.0  # only the seed that had the class
    assert "seeds" not in m["by_class"] and "seeds" not in m["by_class"]["text"]
