"""A strict-enough HTML check with the standard library's parser."""

from __future__ import annotations

from html.parser import HTMLParser

VOID = {"meta", "img", "br", "hr", "link", "input"}


class PageCheck(HTMLParser):
    """Collects tags, figure sources and table cells; records nesting errors."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.images: list[str] = []
        self.tables = 0
        self.cells: list[str] = []
        self.section_ids: list[str] = []
        self.external: list[str] = []
        #: (tag, id) of each element directly inside <main>, in order
        self.main_children: list[tuple[str, str]] = []
        #: each section's id -> the tag of its first child element
        self.section_first: dict[str, str] = {}
        #: the class of the element each <table> sits directly in
        self.table_parents: list[str] = []
        self._in_cell = False
        self._classes: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "img":
            self.images.append(a.get("src") or "")
        if tag in ("script", "link") or (a.get("src") or "").startswith("http"):
            self.external.append(tag)
        if tag == "table":
            self.tables += 1
            self.table_parents.append(self._classes[-1] if self._classes else "")
        if self.stack[-1:] == ["main"]:
            self.main_children.append((tag, a.get("id") or ""))
        if self.stack[-1:] == ["section"] and self.section_ids:
            self.section_first.setdefault(self.section_ids[-1], tag)
        if tag == "section":
            self.section_ids.append(a.get("id") or "")
        if tag in ("td", "th"):
            self._in_cell = True
            self.cells.append("")
        if tag not in VOID:
            self.stack.append(tag)
            self._classes.append(a.get("class") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th"):
            self._in_cell = False
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"unexpected </{tag}> (open: {self.stack[-3:]})")
            return
        self.stack.pop()
        self._classes.pop()

    def handle_data(self, data: str) -> None:
        if self._in_cell:
            self.cells[-1] += data


def check(page: str) -> PageCheck:
    parser = PageCheck()
    parser.feed(page)
    parser.close()
    return parser
