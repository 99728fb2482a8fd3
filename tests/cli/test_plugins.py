"""``servecal plugins``: one list of every extension point's names, each loadable."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.commands.plugins import KINDS
from servecal.costmodels import InputError
from servecal.plugins import Registry, load_object

runner = CliRunner()


def test_every_kind_is_listed_with_its_protocol() -> None:
    res = runner.invoke(app, ["plugins", "--json"])
    assert res.exit_code == 0, res.output
    docs = {d["kind"]: d for d in json.loads(res.stdout)}
    assert set(docs) == set(KINDS)
    names = {k: [e["name"] for e in d["entries"]] for k, d in docs.items()}
    assert {"analytic", "samples", "fit", "device"} <= set(names["truth"])
    assert names["importer"] == ["aiconfigurator", "vidur"]
    assert names["exporter"] == [
        "parquet",
        "csv",
        "dynamo-mocker",
        "aic-fpm",
        "llm-d-sim",
        "vllm-ascend",
    ]
    assert "sloweave" in names["policy"] and "round-robin" not in names["policy"]
    assert "round-robin" in names["router"]
    assert all(d["contract"] for d in docs.values())


def test_one_kind_in_text() -> None:
    res = runner.invoke(app, ["plugins", "exporter"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0].startswith("exporter (--format NAME, or MODULE:ATTR")
    assert any(line.split()[0] == "llm-d-sim" for line in res.stdout.splitlines()[1:])


def test_an_unknown_kind_is_one_line() -> None:
    res = runner.invoke(app, ["plugins", "widgets"])
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        "error: unknown plugin kind 'widgets'; choose " + ", ".join(KINDS)
    ]


@pytest.mark.parametrize("kind", ["truth", "predictor", "importer", "exporter"])
def test_every_built_in_names_an_object_that_imports(kind: str) -> None:
    registry = load_object(KINDS[kind])
    assert isinstance(registry, Registry) and registry.names()
    for entry in registry:
        assert callable(load_object(entry.target)), entry


def test_a_spec_is_a_name_with_an_argument_or_an_import_path() -> None:
    r = Registry("thing", "--thing", "f(arg)")
    r.add("samples", "os.path:join", "x", "samples:PATH")
    assert r.split("samples:/a/b.json")[1:] == ("os.path:join", "/a/b.json")
    assert r.split("mypkg.mod:make") == (None, "mypkg.mod:make", "")
    assert r.split("mypkg.mod:Outer.make:k=1,j=2") == (None, "mypkg.mod:Outer.make", "k=1,j=2")
    for bad in ("nosuch", "not a path:x", "mod:attr-x"):
        with pytest.raises(InputError, match="--thing .*or MODULE:ATTR"):
            r.split(bad)
    with pytest.raises(ValueError):
        r.add("samples", "os:sep", "taken")
