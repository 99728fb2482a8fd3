"""No library code writes the process environment.

What a computation depends on travels as a value (a command's table flags as
``TableTrust``, a run's invocation id in its sweep task), never through ``os.environ``:
a value is seen by the code it is handed to, in any process, and by nothing else; an
environment variable is global, outlives the command unless restored, and reaches
worker processes only if they start after it was set. ``SERVECAL_*`` variables may
still be *read* as a user's defaults (the cache folder, the vLLM venv).

The one exception is a process's own entry, where the environment must be set before
a library reads it at import and no caller can hand it in: a local job worker's
``CUDA_VISIBLE_DEVICES`` (multiprocessing starts a worker with its parent's
environment, and CUDA reads the variable once), and the ``servecal`` console entry's
``OPENBLAS_NUM_THREADS`` (OpenBLAS reads it once, when numpy is imported).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = ("servecal", "profiler", "costmodels", "sched", "reports", "integrations")
#: (file, function) allowed to write the environment: a process entry (see above).
PROCESS_ENTRIES = {
    ("profiler/jobs/local.py", "_worker_main"),
    ("servecal/launch.py", "limit_blas_threads"),
}
MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}


def _is_environ(node: ast.AST) -> bool:
    """``os.environ`` (or a bare ``environ`` imported from os)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ" and isinstance(node.value, ast.Name)
    return isinstance(node, ast.Name) and node.id == "environ"


def _writes(node: ast.AST) -> bool:
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        return any(isinstance(t, ast.Subscript) and _is_environ(t.value) for t in targets)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        func = node.func
        if func.attr in MUTATORS and _is_environ(func.value):
            return True
        return func.attr in ("putenv", "unsetenv") and isinstance(func.value, ast.Name)
    return False


def environment_writes(source: str) -> list[tuple[int, str]]:
    """``(line, enclosing function)`` of every write to ``os.environ`` in ``source``."""
    found = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = (
                child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
            )
            if _writes(child):
                found.append((child.lineno, where))
            visit(child, inner)

    visit(ast.parse(source), "<module>")
    return found


def test_no_library_code_writes_the_environment() -> None:
    bad = []
    for package in PACKAGE_DIRS:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for line, where in environment_writes(path.read_text()):
                if (rel, where) not in PROCESS_ENTRIES:
                    bad.append(f"{rel}:{line} (in {where})")
    assert not bad, "writes os.environ (hand the value to whatever needs it):\n  " + "\n  ".join(
        bad
    )


def test_the_scan_sees_every_kind_of_write() -> None:
    writes = [
        "os.environ['A'] = '1'",
        "del os.environ['A']",
        "os.environ.update(x)",
        "os.environ.setdefault('A', '1')",
        "os.environ.pop('A', None)",
        "os.putenv('A', '1')",
        "environ['A'] = '1'",
    ]
    for text in writes:
        assert environment_writes(f"import os\ndef f():\n    {text}\n") == [(3, "f")], text
    reads = ["os.environ.get('A')", "x = os.environ['A']", "dict(os.environ)", "env['A'] = 1"]
    for text in reads:
        assert environment_writes(f"import os\n{text}\n") == [], text
