"""Model shapes (names, files, hash) and the sweep design (coverage, order, grid files)."""

import json

import numpy as np
import pytest

from servecal.profiler.design import CPU_GRID, Grid, Point, bisection_levels, design_points
from servecal.profiler.shapes import SHAPES, ModelShape
from servecal.util.errors import InputError


def test_shipped_shapes_match_public_configs():
    s = ModelShape.from_name("llama-3-8b")
    assert (s.n_layers, s.hidden, s.n_heads, s.n_kv_heads, s.intermediate, s.vocab) == (
        32,
        4096,
        32,
        8,
        14336,
        128256,
    )
    assert ModelShape.from_name("llama-3-70b").n_layers == 80
    assert {"tiny", "qwen2.5-14b", "mistral-7b"} <= set(SHAPES)


def test_shape_files_json_and_toml_and_hash(tmp_path):
    fields = {
        "n_layers": 2,
        "hidden": 64,
        "n_heads": 4,
        "n_kv_heads": 2,
        "head_dim": 16,
        "intermediate": 128,
        "vocab": 100,
    }
    (tmp_path / "mine.json").write_text(json.dumps(fields))
    (tmp_path / "mine.toml").write_text("\n".join(f"{k} = {v}" for k, v in fields.items()))
    a = ModelShape.resolve(str(tmp_path / "mine.json"))
    b = ModelShape.from_file(tmp_path / "mine.toml")
    assert a == b and a.name == "mine"
    assert a.hash == b.hash and len(a.hash) == 16
    assert a.hash != ModelShape(**{**fields, "name": "x", "vocab": 101}).hash


@pytest.mark.parametrize(
    "text, match",
    [
        ("{", "not valid JSON"),
        ('{"n_layers": 2}', "missing field"),
        (
            '{"n_layers": 2, "hidden": 64, "n_heads": 3, "n_kv_heads": 2, "head_dim": 16, '
            '"intermediate": 8, "vocab": 9}',
            "multiple of",
        ),
        ('{"bogus": 1}', "unknown model shape field"),
    ],
)
def test_bad_shape_files_are_one_line_input_errors(tmp_path, text, match):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(InputError, match=match) as err:
        ModelShape.from_file(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_unknown_shape_name():
    with pytest.raises(InputError, match="unknown model shape"):
        ModelShape.resolve("gpt-5")


def test_bisection_levels_coarse_to_fine():
    assert bisection_levels(1) == [0]
    assert bisection_levels(5) == [0, 2, 1, 2, 0]
    assert bisection_levels(7)[0] == bisection_levels(7)[-1] == 0


def test_design_covers_every_valid_point_once_collapsing_unused_axes():
    grid = Grid(n_decode=(0, 2, 8), chunk=(0, 16, 64), ctx=(32, 128), prefix=(0, 64))
    points = design_points(grid, np.random.default_rng(0))
    assert len(points) == len(set(points))
    expected = {
        Point(n, c, ctx if n else 0, p if c else 0)
        for n in grid.n_decode
        for c in grid.chunk
        for ctx in grid.ctx
        for p in grid.prefix
        if n + c
    }
    assert set(points) == expected
    assert all(p.ctx == 0 for p in points if p.n_decode == 0)


def test_design_order_is_coarse_first_shuffled_and_seeded():
    points = design_points(CPU_GRID, np.random.default_rng(0))
    corners = {(p.n_decode in (0, 32)) and (p.chunk in (0, 128)) for p in points[:6]}
    assert corners == {True}  # the first points are the grid's extremes
    assert points == design_points(CPU_GRID, np.random.default_rng(0))
    assert points != design_points(CPU_GRID, np.random.default_rng(1))
    assert points != sorted(points)


def test_grid_file_errors(tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"n_decode": [1], "chunk": [0]}))
    with pytest.raises(InputError, match="missing ctx, prefix"):
        Grid.from_file(path)
    path.write_text(json.dumps({"n_decode": [-1], "chunk": [0], "ctx": [1], "prefix": [0]}))
    with pytest.raises(InputError, match="integers >= 0"):
        Grid.from_file(path)
    path.write_text(json.dumps({"n_decode": [4, 1], "chunk": [0], "ctx": [1], "prefix": [0]}))
    assert Grid.from_file(path).n_decode == (1, 4)
