"""CostTable queries, rules, errors and the numpy-only loader."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from tablefactory import AXES_SMALL, physics_grid, small_table

from servecal.costmodels import CostTable, InputError, MissingQuantileError, Predictor
from servecal.costmodels.table import FingerprintMismatchWarning


def test_is_a_predictor_and_answers_grid_points_exactly() -> None:
    t = small_table()
    assert isinstance(t, Predictor)
    grid = physics_grid(AXES_SMALL)
    # grid value at n=8, ctx=1024, prefix=0, chunk=256
    assert t.predict(8, 256, 1024, 0) == grid[1, 1, 0, 2]
    assert t.predict(8, 256, 1024, 0, q=0.99) == grid[1, 1, 0, 2] * 1.2
    assert t.margin(8, 256, 1024, 0) == 0.05 * grid[1, 1, 0, 2] * 1.2
    assert t.energy(8, 256, 1024) == grid[1, 1, 0, 2] * 0.3
    assert t.quantiles == (0.5, 0.99) and t.tail == 0.99 and t.out_of_domain == 0


def test_between_grid_points_rounds_up() -> None:
    t = small_table(between="round_up")
    assert t.predict(5, 65, 1, 0) == t.predict(8, 256, 1024, 0)
    assert t.predict(8.0, 64.0) == t.predict(8, 64)
    assert t.out_of_domain == 0
    assert CostTable.from_json(json.loads(t.dumps())).between == "round_up"


def test_between_grid_points_interpolates_multilinearly() -> None:
    t = small_table()  # linear is the default rule
    assert t.between == "linear"
    # halfway along chunk (64 -> 256) at a grid point of the other axes: the mean
    assert t.predict(8, 160, 1024, 0) == pytest.approx(
        0.5 * (t.predict(8, 64, 1024, 0) + t.predict(8, 256, 1024, 0))
    )
    # a quarter of the way along n (8 -> 32) and ctx (0 -> 1024) at once: bilinear
    corners = [[t.predict(n, 256, x, 0) for x in (0, 1024)] for n in (8, 32)]
    want = 0.75 * (0.75 * corners[0][0] + 0.25 * corners[0][1])
    want += 0.25 * (0.75 * corners[1][0] + 0.25 * corners[1][1])
    assert t.predict(14, 256, 256, 0) == pytest.approx(want)
    assert t.predict(14, 256, 256, 0) < small_table(between="round_up").predict(14, 256, 256, 0)
    # the margin is interpolated too, so it stays rho x the interpolated tail
    assert t.margin(14, 100, 300) == pytest.approx(0.05 * t.predict(14, 100, 300, q=0.99))
    assert t.energy(14, 100, 300) == pytest.approx(0.3 * t.predict(14, 100, 300))
    assert t.out_of_domain == 0


def test_beyond_grid_clamps_and_counts() -> None:
    t = small_table()
    assert t.predict(64, 4096, 5000, 7) == t.predict(32, 1024, 1024, 0)
    assert t.out_of_domain == 1
    t.predict(-1, 0)
    assert t.out_of_domain == 2
    t.predict(np.array([1, 64, 100]), np.array([10, 10, 10]))
    assert t.out_of_domain == 4


@pytest.mark.parametrize("between", ["linear", "round_up"])
def test_vectorised_matches_scalar_and_broadcasts(between: str) -> None:
    t = small_table(between=between)
    rng = np.random.default_rng(0)
    n = rng.integers(0, 40, 200)
    c = rng.integers(0, 1200, 200)
    ctx = rng.integers(0, 1100, 200)
    for q in t.quantiles:
        vec = t.predict(n, c, ctx, 0, q=q)
        assert vec.shape == (200,)
        assert vec.tolist() == [
            t.predict(int(a), int(b), int(x), 0, q=q) for a, b, x in zip(n, c, ctx, strict=True)
        ]
    assert t.margin(n, c, ctx).tolist() == [
        t.margin(int(a), int(b), int(x)) for a, b, x in zip(n, c, ctx, strict=True)
    ]
    assert t.predict(np.array([1, 8]), 64).shape == (2,)
    assert isinstance(t.predict(np.int64(3), np.int64(10)), float)


def test_max_chunk_uses_grid_values_and_limit() -> None:
    t = small_table(rho=0.0, between="round_up")
    bound = t.predict(8, 256, 0, 0, q=0.99) + t.margin(8, 256, 0, 0)
    assert t.max_chunk(8, 0, 0, bound, 4096) == 256
    assert t.max_chunk(8, 0, 0, bound, 100) == 100
    assert t.max_chunk(8, 0, 0, bound - 1e-9, 4096) == 64
    assert t.max_chunk(8, 0, 0, 0.0, 4096) == 0
    assert t.max_chunk(8, 0, 0, float("nan"), 4096) == 0
    assert t.max_chunk(8, 0, 0, 1e9, 0) == 0
    top = t.predict(8, 1024, q=0.99) + t.margin(8, 1024)
    assert t.max_chunk(8, 0, 0, top, 5000) == 5000  # clamp beyond the top: as predict says
    assert t.out_of_domain == 1


def test_max_chunk_interpolates_and_equals_the_largest_fitting_chunk() -> None:
    t = small_table()

    def bound(c: int, ctx: float) -> float:
        return t.predict(8, c, ctx, 0, q=0.99) + t.margin(8, c, ctx, 0)

    for ctx in (0, 300.5, 1024):
        for budget in (bound(100, ctx), bound(600, ctx) + 1e-3, bound(1000, ctx) - 1e-9):
            want = max(c for c in range(1, 1025) if bound(c, ctx) <= budget)
            got = t.max_chunk(8, ctx, 0, budget, 4096)
            assert got == want and 64 < got < 1024  # between grid points, not on one
    assert t.out_of_domain == 0


def test_degenerate_axes_work() -> None:
    axes = {"n_decode": [4], "ctx": [0], "prefix": [0], "chunk": [128]}
    t = CostTable(axes, {0.5: [2.0]})
    assert t.predict(4, 128) == 2.0
    assert t.predict(np.array([1, 2]), 7).tolist() == [2.0, 2.0]
    assert t.max_chunk(4, 0, 0, 3.0, 50, q=0.5, use_margin=False) == 50


def test_median_only_table_refuses_tail_questions() -> None:
    t = CostTable(AXES_SMALL, {0.5: physics_grid(AXES_SMALL)})
    assert t.tail is None and t.to_json()["margin"] is None
    with pytest.raises(MissingQuantileError, match="medians only"):
        t.predict(1, 1, q=0.99)
    with pytest.raises(MissingQuantileError, match="medians only"):
        t.max_chunk(1, 0, 0, 10.0, 100)
    with pytest.raises(MissingQuantileError, match="no calibrated margin"):
        t.max_chunk(1, 0, 0, 10.0, 100, q=0.5)
    with pytest.raises(MissingQuantileError):
        t.margin(1, 1)
    assert t.max_chunk(8, 0, 0, 1e9, 100, q=0.5, use_margin=False) == 100
    assert np.isnan(t.energy(1, 1))


def test_constructor_rejects_non_monotone_and_crossing() -> None:
    bad = physics_grid(AXES_SMALL)
    bad[1, 0, 0, 2] = 100.0
    with pytest.raises(ValueError, match="quantile 0.5 decreases along 'n_decode'"):
        CostTable(AXES_SMALL, {0.5: bad})
    p = physics_grid(AXES_SMALL)
    with pytest.raises(ValueError, match="below"):
        CostTable(AXES_SMALL, {0.5: p, 0.99: p * 0.9})


def test_save_load_round_trip_is_exact(tmp_path: Path) -> None:
    t = small_table()
    t.save(tmp_path / "t.json")
    back = CostTable.load(tmp_path / "t.json")
    assert back.to_json() == t.to_json()
    assert back.dumps() == (tmp_path / "t.json").read_text()


def test_fingerprint_mismatch_warns_or_refuses(tmp_path: Path) -> None:
    small_table().save(tmp_path / "t.json")
    same = {"device_name": "H200", "model_hash": "m1", "date": "other day"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CostTable.load(tmp_path / "t.json", fingerprint=same)
    other = {"device_name": "A100", "model_hash": "m1"}
    with pytest.raises(InputError, match="fingerprint mismatch.*--allow-mismatch"):
        CostTable.load(tmp_path / "t.json", fingerprint=other)  # refused by default
    with pytest.warns(FingerprintMismatchWarning, match="device_name"):
        CostTable.load(tmp_path / "t.json", strict=False, fingerprint=other)


def _doc() -> dict:
    return small_table().to_json()


@pytest.mark.parametrize(
    ("mutate", "words"),
    [
        (lambda d: d.update(schema="servecal.costtable/0"), "wrong schema"),
        (lambda d: d.pop("axes"), "'axes': missing"),
        (lambda d: d["quantiles"].update({"0.5": [1.0, 2.0]}), "quantile 0.5"),
        (lambda d: d["quantiles"]["0.99"].__setitem__(3, "x"), "quantiles.0.99"),
        (lambda d: d["axes"].update(chunk=[0, 64, 64, 1024]), "strictly increasing"),
        (lambda d: d["margin"].update(rho=-2.0), "'margin'"),
        (lambda d: d.update(tail=0.9), "'tail'"),
        (lambda d: d.update(between="interpolate"), "between"),
        (lambda d: d["domain"].update(chunk=[0, 5]), "'domain'"),
        (lambda d: d.update(energy_j=[1.0]), "energy_j"),
    ],
)
def test_bad_tables_are_one_line_input_errors(tmp_path: Path, mutate, words: str) -> None:
    doc = _doc()
    mutate(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as exc:
        CostTable.load(path)
    msg = str(exc.value)
    assert "\n" not in msg and str(path) in msg and words in msg


def test_truncated_and_non_json_tables(tmp_path: Path) -> None:
    text = small_table().dumps()
    (tmp_path / "cut.json").write_text(text[: len(text) // 2])
    (tmp_path / "list.json").write_text("[1, 2]")
    for name, words in [("cut.json", "invalid JSON"), ("list.json", "not a JSON object")]:
        with pytest.raises(InputError) as exc:
            CostTable.load(tmp_path / name)
        assert "\n" not in str(exc.value) and name in str(exc.value) and words in str(exc.value)
    with pytest.raises(InputError, match="cannot read"):
        CostTable.load(tmp_path / "absent.json")


def test_loading_a_table_imports_no_heavy_library(tmp_path: Path) -> None:
    """numpy only: nothing of the fitting stack, and no numba (a table's search is
    compiled only once hot, costmodels/table.py's HOT_CALLS)."""
    small_table().save(tmp_path / "t.json")
    code = (
        "import sys\n"
        "from servecal.costmodels import CostTable\n"
        f"t = CostTable.load({str(tmp_path / 't.json')!r})\n"
        "t.predict(1, 2); t.max_chunk(1, 0, 0, 5.0, 100)\n"
        "heavy = [m for m in ('torch', 'pandas', 'sklearn', 'lightgbm', 'scipy.stats', "
        "'scipy.optimize', 'numba') if m in sys.modules]\n"
        "print(','.join(heavy) or 'clean')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "clean"


def test_json_schema_file_matches_the_document() -> None:
    schema_path = Path(__file__).resolve().parents[2] / "docs" / "costtable.schema.json"
    schema = json.loads(schema_path.read_text())
    doc = small_table().to_json()
    assert set(schema["required"]) == set(doc) == set(schema["properties"])
    assert schema["properties"]["schema"]["const"] == doc["schema"]
    assert schema["properties"]["axis_order"]["const"] == doc["axis_order"]
    margin = schema["properties"]["margin"]["oneOf"][1]
    assert set(margin["required"]) == set(doc["margin"])


def test_tp_comes_from_the_samples_provenance_and_round_trips(tmp_path: Path) -> None:
    table = small_table(fingerprint={"device_name": "A100", "tp": 4})
    assert table.tp == 4 and small_table().tp == 1
    path = tmp_path / "t.json"
    table.save(path)
    assert json.loads(path.read_text())["tp"] == 4
    assert CostTable.load(path).tp == 4
    doc = small_table().to_json()
    del doc["tp"]  # a table written before tensor parallelism: TP 1
    assert CostTable.from_json(doc).tp == 1
    for bad in (0, 2.5, "4", True):
        doc["tp"] = bad
        with pytest.raises(InputError, match="field 'tp'"):
            CostTable.from_json(doc, "t.json")


def test_queries_beyond_the_grid_are_counted_per_axis() -> None:
    """No silent clamp: predict, arrays and max_chunk count each clamped query once in
    out_of_domain and on every axis it lies beyond; in-grid queries count nothing."""
    table = CostTable(
        {"n_decode": [0, 8], "ctx": [0, 1024], "prefix": [0, 512], "chunk": [0, 64, 256]},
        {0.5: np.arange(24, dtype=float).reshape(2, 2, 2, 3)},
    )
    table.predict(4, 100, ctx=500, prefix=10)
    assert table.out_of_domain == 0 and not any(table.beyond_grid.values())
    table.predict(4, 300, ctx=500)  # chunk beyond
    table.predict(9, 300, ctx=2000)  # n_decode, ctx and chunk beyond: one query
    table.predict(np.array([4, 4]), np.array([10, 10]), ctx=np.array([0, 5000]))
    assert table.max_chunk(2, 0, 0, 1e9, 1000, q=0.5, use_margin=False) == 1000
    assert table.out_of_domain == 4
    assert table.beyond_grid == {"n_decode": 1, "ctx": 2, "prefix": 0, "chunk": 3}
    rounded = table.with_between("round_up")
    rounded.predict(4, 10, ctx=0, prefix=600)
    assert rounded.beyond_grid["prefix"] == 1 and rounded.out_of_domain == 1


def test_a_pickled_table_answers_and_counts_as_the_original() -> None:
    """A table crosses process boundaries (sweeps, job backends) by pickle: its data and
    counts travel, each process binds its own compiled routines."""
    import pickle

    table = small_table()
    table.predict(10_000, 5)  # one clamped query
    back = pickle.loads(pickle.dumps(table))
    assert back.out_of_domain == table.out_of_domain == 1
    assert back.predict(3, 100, 50.5, 0, q=0.99) == table.predict(3, 100, 50.5, 0, q=0.99)
    assert back.max_chunk(3, 50.5, 0, 5.0, 300) == table.max_chunk(3, 50.5, 0, 5.0, 300)
    assert back.dumps() == table.dumps()


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ([1.0, True, 2.0], "list of numbers"),
        ([1.0, None], "list of numbers"),
        ("1.0", "list of numbers"),
        ([1.0, float("nan")], "non-finite"),
        ([1.0, float("inf")], "non-finite"),
        ([1.0, 10**400], "too large"),
        ([1.0, -(2**60)], "too large"),
    ],
)
def test_a_grid_list_refuses_what_is_not_a_finite_number(values, words: str) -> None:
    from servecal.costmodels.table_schema import _num_list

    with pytest.raises(InputError, match=words):
        _num_list(values, "t.json", "energy_j")


def test_a_grid_list_keeps_its_numbers_as_floats() -> None:
    from servecal.costmodels.table_schema import _num_list

    got = _num_list([0, 1, 2.5, 2**53], "t.json", "energy_j")
    assert got == [0.0, 1.0, 2.5, float(2**53)] and all(type(v) is float for v in got)
    assert _num_list([], "t.json", "energy_j") == []
