"""Imports only point down (docs/design.md): CLI → reports / integrations → sched →
profiler → costmodels → ``servecal.util``.

Every ``import`` and ``from ... import`` of every module is read from its syntax tree
(at the top or inside a function: a lazy import is still a dependency), and so is every
registry entry's ``"servecal.module:attr"`` import path (imported on use, a dependency
all the same). A module may import its own stage and the stages below it, never one
above; reports and integrations are one stage, and neither imports the other.
``servecal.plugins`` (the extension-point registry) is ground floor, beside
``servecal.util``: every stage names its built-ins through it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Folder of the repository → the package it is installed as (setup.py's mapping).
PACKAGE_DIRS = {
    "servecal": "servecal",
    "costmodels": "servecal.costmodels",
    "profiler": "servecal.profiler",
    "sched": "servecal.sched",
    "reports": "servecal.reports",
    "integrations": "servecal.integrations",
}
#: Module prefix → its stage's height (the longest matching prefix decides).
STAGES = {
    "servecal": 0,  # the package itself holds only __version__
    "servecal.util": 0,
    "servecal.plugins": 0,
    "servecal.costmodels": 1,
    "servecal.profiler": 2,
    "servecal.sched": 3,
    "servecal.reports": 4,
    "servecal.integrations": 4,
    "servecal.cli": 5,
    "servecal.commands": 5,
    "servecal.__main__": 5,
    "servecal.launch": 5,  # the console entry: sets up the process, then runs the CLI
}
#: Stages of one height that must not import each other.
APART = {"servecal.reports", "servecal.integrations"}
_IMPORT_PATH = re.compile(r"^(servecal(?:\.\w+)*):[A-Za-z_][\w.]*(?::.*)?$")


def stage(module: str) -> tuple[str, int]:
    """``(prefix, height)`` of the stage ``module`` belongs to."""
    best = max(
        (p for p in STAGES if module == p or module.startswith(p + ".")),
        key=len,
    )
    return best, STAGES[best]


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    parts = [p for p in rel.with_suffix("").parts[1:] if p != "__init__"]
    return ".".join([PACKAGE_DIRS[rel.parts[0]], *parts])


def imported(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """``(line, module)`` of every servecal module ``source`` imports or names by import
    path (relative imports resolved against ``module``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join([*parent, base] if base else parent)
            found.append((node.lineno, base))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = _IMPORT_PATH.match(node.value)
            if match:
                found.append((node.lineno, match.group(1)))
    return [(line, name) for line, name in found if name.split(".")[0] == "servecal"]


def upward_imports(path: Path) -> list[str]:
    module = module_name(path)
    mine, height = stage(module)
    bad = []
    for line, target in imported(path.read_text(), module, path.name == "__init__.py"):
        theirs, their_height = stage(target)
        if their_height > height or (theirs != mine and {theirs, mine} <= APART):
            bad.append(f"{path.relative_to(ROOT)}:{line}: {mine} imports {target} ({theirs})")
    return bad


def test_imports_only_point_down() -> None:
    bad = []
    for folder in PACKAGE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            bad += upward_imports(path)
    assert not bad, "an import from a lower stage to a higher one:\n  " + "\n  ".join(bad)


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    profiler = ROOT / "profiler" / "vllm_engine.py"
    assert stage(module_name(profiler)) == ("servecal.profiler", 2)
    cases = {
        "from servecal.integrations.bench.server import x\n": 1,
        "def f():\n    import servecal.sched.engine\n": 1,
        'TARGET = "servecal.reports.page:build_report"\n': 1,
        "from servecal.costmodels import CostTable\nimport servecal.util.errors\n": 0,
        "from servecal.plugins import Registry\nfrom servecal import __version__\n": 0,
    }
    for text, expected in cases.items():
        found = imported(text, "servecal.profiler.vllm_engine", False)
        ups = [t for _, t in found if stage(t)[1] > 2]
        assert len(ups) == expected, text
    # a relative import resolves against the module (and a package's own __init__)
    assert imported("from ..sched import engine\n", "servecal.profiler.x", False) == [
        (1, "servecal.sched")
    ]
    assert imported("from .jobs import base\n", "servecal.profiler", True) == [
        (1, "servecal.profiler.jobs")
    ]
    # reports and integrations are one stage: neither imports the other
    assert stage("servecal.reports.page")[1] == stage("servecal.integrations.bench")[1]
