"""servecal as it was at another git revision, importable beside this checkout.

``package_at(rev, folder)`` extracts servecal's stage folders at ``rev`` (``git
archive``) into ``folder/servecal_at_rev`` and points their ``servecal.<stage>``
imports at that package, so a benchmark can time the code of ``rev`` and of the
working tree in one process, on the same inputs (``--baseline REV``).
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tarfile
from pathlib import Path

#: servecal's stage folders (setup.py maps each to ``servecal.<name>``).
STAGES = ("costmodels", "sched", "integrations", "profiler", "reports")
NAME = "servecal_at_rev"


def package_at(rev: str, folder: Path, name: str = NAME) -> str:
    """The name of a package holding servecal's stages at ``rev`` (importable now);
    ``name`` tells several revisions apart in one process."""
    root = Path(folder) / name
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev, *STAGES],
        cwd=Path(__file__).resolve().parents[1], check=True, capture_output=True,
    ).stdout  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    (root / "__init__.py").write_text("")
    stages = "|".join(STAGES)
    pattern = re.compile(rf"^(\s*)(from|import)(\s+)servecal\.({stages})\b", re.MULTILINE)
    for path in root.rglob("*.py"):
        path.write_text(pattern.sub(rf"\1\2\3{name}.\4", path.read_text()))
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return name
