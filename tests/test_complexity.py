"""No function in any package (costmodels/, sched/, integrations/, profiler/, reports/,
servecal/) is above cyclomatic complexity 15 (radon) unless it says why it is one
function (docs/design.md, "Code style"): a comment starting with ``# One function:`` at
the top of its body, before its first statement after the docstring (a hot path, where
a call per stage would be paid every iteration)."""

from __future__ import annotations

import ast
from pathlib import Path

from radon.complexity import cc_visit

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("costmodels", "sched", "integrations", "profiler", "reports", "servecal")
LIMIT = 15
MARK = "# One function:"


def _functions(path: Path) -> list[tuple[str, int, int]]:
    """(qualified name, def line, complexity) of every function and method in a file."""
    # radon lists every method both inside its class and on its own: keep the latter
    blocks = cc_visit(path.read_text())
    return [(b.fullname, b.lineno, b.complexity) for b in blocks if hasattr(b, "is_method")]


def _says_why(source: str, tree: ast.Module, lineno: int) -> bool:
    """Whether the function defined at ``lineno`` has the mark between its ``def`` and its
    first statement after the docstring."""
    node = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno == lineno
    )
    body = node.body
    has_doc = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    first = body[1] if has_doc and len(body) > 1 else body[0]
    lines = source.splitlines()[node.lineno - 1 : first.lineno - 1]
    return any(line.strip().startswith(MARK) for line in lines)


def over_limit() -> list[tuple[str, str, int, bool]]:
    """(file, function, complexity, says why) of every function above the limit."""
    rows = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            source = path.read_text()
            tree = ast.parse(source)
            rel = path.relative_to(ROOT).as_posix()
            for name, lineno, complexity in _functions(path):
                if complexity > LIMIT:
                    rows.append((rel, name, complexity, _says_why(source, tree, lineno)))
    return rows


def test_complex_functions_say_why_they_are_one() -> None:
    unexplained = [
        f"{rel}: {name} (complexity {cc})" for rel, name, cc, why in over_limit() if not why
    ]
    assert not unexplained, (
        f"above complexity {LIMIT} with no '{MARK} ...' comment at the top of the body "
        "(split it, or say why it reads best as one):\n  " + "\n  ".join(unexplained)
    )


def test_the_check_sees_a_mark_and_its_absence(tmp_path: Path) -> None:
    branches = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(LIMIT + 1))
    plain = f'def f(x):\n    """Doc."""\n{branches}\n    return -1\n'
    marked = plain.replace('"""Doc."""\n', f'"""Doc."""\n    {MARK} a dispatch table.\n')
    late = plain.replace("    return -1\n", f"    {MARK} too late.\n    return -1\n")
    for text, expected in ((plain, False), (marked, True), (late, False)):
        path = tmp_path / "m.py"
        path.write_text(text)
        ((name, lineno, complexity),) = _functions(path)
        assert complexity > LIMIT
        assert _says_why(text, ast.parse(text), lineno) is expected, text
