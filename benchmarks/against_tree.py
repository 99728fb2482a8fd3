"""Run a benchmark script against another tree of servecal (a baseline), same venv.

    git archive COMMIT | tar -x -C /tmp/base
    python benchmarks/against_tree.py /tmp/base benchmarks/cluster.py --replicas 64

The editable install maps ``servecal.*`` onto this worktree through a finder on
``sys.meta_path``; this drops that finder, lays out ``servecal/`` with the tree's
stage folders (``setup.py``'s mapping: ``profiler/`` is ``servecal.profiler`` and so
on) in a temporary folder first on ``sys.path``, and runs the script there as
``__main__`` (its own folder on ``sys.path``, as ``python SCRIPT`` would).
"""

from __future__ import annotations

import runpy
import sys
import tempfile
from pathlib import Path

STAGES = ("profiler", "costmodels", "sched", "reports", "integrations")


def main() -> None:
    if len(sys.argv) < 3 or not (Path(sys.argv[1]) / "servecal" / "__init__.py").is_file():
        print(f"error: usage: {sys.argv[0]} TREE SCRIPT [ARGS...] (TREE: an extracted "
              "servecal tree)", file=sys.stderr)  # fmt: skip
        raise SystemExit(2)
    tree, script = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    root = Path(tempfile.mkdtemp(prefix="servecal-tree-"))
    package = root / "servecal"
    package.mkdir()
    for entry in (tree / "servecal").iterdir():
        (package / entry.name).symlink_to(entry)
    for stage in STAGES:
        (package / stage).symlink_to(tree / stage)
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
    sys.path[:0] = [str(root), str(script.parent)]
    sys.argv = [str(script), *sys.argv[3:]]
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
