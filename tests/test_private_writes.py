"""No module writes another object's underscored attribute.

An underscored attribute belongs to the class that defines it: only that class's own
methods (``self._x = ...``, ``cls._x = ...``) change it. Anything else changes an object
through its public methods, so a class can keep its fields consistent with each other
(see sched/live.py's transitions). The scan covers every stage folder of the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = ("servecal", "profiler", "costmodels", "sched", "reports", "integrations")
OWNERS = ("self", "cls")


def foreign_private_writes(source: str) -> list[tuple[int, str]]:
    """``(line, target)`` of each ``x._name = ...`` (or ``+=``, ``del``) where ``x`` is
    not ``self``/``cls``; dunder names are not private and are not reported."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for sub in ast.walk(target):
                if not isinstance(sub, ast.Attribute) or not sub.attr.startswith("_"):
                    continue
                if sub.attr.startswith("__"):
                    continue
                if isinstance(sub.value, ast.Name) and sub.value.id in OWNERS:
                    continue
                found.append((sub.lineno, ast.unparse(sub)))
    return found


def test_the_scan_finds_writes_to_another_objects_private_field() -> None:
    source = (
        "class A:\n"
        "    def f(self, live):\n"
        "        self._ok = 1\n"
        "        live._phase = 2\n"
        "        live.state._n += 1\n"
        "        a, other._b = 1, 2\n"
        "        del live._x\n"
        "        obj.__dict__ = {}\n"
    )
    assert foreign_private_writes(source) == [
        (4, "live._phase"),
        (5, "live.state._n"),
        (6, "other._b"),
        (7, "live._x"),
    ]


def test_no_module_writes_another_objects_private_field() -> None:
    offenders = []
    files = [p for d in PACKAGE_DIRS for p in sorted((ROOT / d).rglob("*.py"))]
    assert len(files) > 100  # the scan really reads the package
    for path in files:
        for line, target in foreign_private_writes(path.read_text()):
            offenders.append(f"{path.relative_to(ROOT)}:{line}: {target}")
    assert offenders == []
