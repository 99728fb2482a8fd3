"""The documentation holds together: every relative link in README.md and docs/ resolves
(file and anchor), every dated results page is in the results index, and nothing cites
a file that is not in the repository.

Anchors are computed the way GitHub renders a heading's id (lower case, punctuation
and symbols dropped, spaces to hyphens, ``-1``, ``-2`` for repeats), so a link that
works here works on the repository's web page.
"""

from __future__ import annotations

import re
import subprocess
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target "title") and ![alt](target); the target may be wrapped in <...>.
INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]"  # [text], one level of nested brackets allowed
    r"\(\s*(<[^>]*>|[^\s)]+)(?:\s+\"[^\"]*\")?\s*\)"  # (target "optional title")
)
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(\S+)(?:\s+\"[^\"]*\")?\s*$")
HTML_ID = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...
DATED_PAGE = re.compile(r"^\d{4}-\d{2}-\d{2}-[a-z0-9][a-z0-9-]*\.md$")

# Unicode categories GitHub keeps in a heading id: letters, marks, digits, connectors.
KEPT_CATEGORIES = {"Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "Pc"}


def markdown_files() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def prose_lines(text: str) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks, inline code removed."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(INLINE_CODE.sub("", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's id for a heading's text (before de-duplication)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = text.replace("`", "").replace("*", "")
    kept = (ch for ch in text.lower() if ch in " -" or unicodedata.category(ch) in KEPT_CATEGORIES)
    return "".join(kept).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a link into ``path`` may name: heading ids and explicit HTML ids."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        found.update(HTML_ID.findall(line))
        match = HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def link_targets(path: Path) -> list[str]:
    """The link targets written in a Markdown file (inline, image and reference links)."""
    targets = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        targets += [t.strip("<>") for t in INLINE_LINK.findall(line)]
        targets += REFERENCE_DEF.findall(line)
    return targets


def broken_links(path: Path) -> list[str]:
    """Each relative link of ``path`` whose file or anchor does not exist, with why."""
    broken = []
    for target in link_targets(path):
        if EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with id #{anchor} in {dest.name}")
    return broken


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        (
            "§1 SLOWeave: deadline-filling adaptive prefill chunks",
            "1-sloweave-deadline-filling-adaptive-prefill-chunks",
        ),
        ("Choosing the model (`--model auto`)", "choosing-the-model---model-auto"),
        ("Default rates (`sched/experiment/spec.py`)", "default-rates-schedexperimentspecpy"),
        ("The torch executor (`sched/torch_executor/`)", "the-torch-executor-schedtorch_executor"),
        ("Output: run folders", "output-run-folders"),
        ("4. Sorted-F-Online (engine policy)", "4-sorted-f-online-engine-policy"),
        ("**Bold** [a link](x.md) — and ≤ symbols", "bold-a-link--and--symbols"),
    ],
)
def test_heading_ids_follow_github(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_the_checker_reports_a_broken_file_and_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Title\n\n## Part\n\n## Part\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#part-1) [ok](#here) [web](https://example.org/x.md)\n"
        "# Here\n\n[gone](missing.md) [bad](other.md#nowhere)\n"
        "```\n[in code](ignored.md)\n```\n`[inline](ignored.md)`\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#nowhere: no heading with id #nowhere in other.md",
    ]


def test_every_dated_results_page_is_in_the_index() -> None:
    index = RESULTS / "README.md"
    listed = {Path(t.partition("#")[0]).name for t in link_targets(index)}
    pages = sorted(p.name for p in RESULTS.glob("*.md") if p.name != "README.md")
    assert [p for p in pages if not DATED_PAGE.match(p)] == []  # YYYY-MM-DD-<study>.md
    assert [p for p in pages if p not in listed] == []


# --- citations of files that are not in the repository ---------------------------------

# Built by concatenation so that this file does not cite them itself.
UNREACHABLE = (
    "../" + "shared",
    "SPEC" + ".md",
    "DESIGN" + ".md",
    "SPEC" + " §",
    "docs/" + "readme",
)
# tests/data keeps its sources' own READMEs; the sweep script names what it rewrites.
NOT_SCANNED = ("tests/data/", "scripts/fix_citations.sh", "tests/test_docs_links.py")


def tracked_files() -> list[str]:
    """Paths of the repository's tracked files (the tree, minus caches, without git)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
        ).stdout
        return [p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", "build"}
        return [
            str(p.relative_to(REPO))
            for p in REPO.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(REPO).parts)
        ]


def citations_outside_repo() -> list[str]:
    """``path:line: text`` for every line of a text file that cites a file not in the repo."""
    hits = []
    for rel in tracked_files():
        if rel.startswith(NOT_SCANNED) or not (REPO / rel).is_file():
            continue
        data = (REPO / rel).read_bytes()
        if b"\0" in data:  # binary (Parquet, images): nothing a reader follows
            continue
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if any(word in line for word in UNREACHABLE):
                hits.append(f"{rel}:{number}: {line.strip()}")
    return hits


def test_docs_cite_only_files_in_the_repository() -> None:
    hits = [h for h in citations_outside_repo() if h.startswith(("docs/", "README.md"))]
    assert hits == []


def test_nothing_cites_files_outside_the_repository() -> None:
    assert citations_outside_repo() == []
