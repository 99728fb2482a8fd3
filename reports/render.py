"""Render sections to one self-contained HTML page and to a Markdown summary.

The HTML embeds every figure as a base64 PNG data URI and uses inline CSS only,
so the page opens in a browser with no network. Tables stay real ``<table>``
elements so numbers can be copied.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence

from servecal.reports.blocks import Figure, Section, Table, Text

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;
color:#1d2330;background:#fafbfc;line-height:1.45}
main{max-width:1180px;margin:0 auto;padding:24px 32px 64px}
h1{font-size:1.7em;margin:0 0 4px} h2{border-bottom:2px solid #d0d7de;padding-bottom:4px;
margin-top:40px} h3{margin:24px 0 6px;font-size:1.05em}
nav a{margin-right:16px} .meta{color:#57606a;font-size:.92em}
table{border-collapse:collapse;margin:6px 0 4px;font-size:.88em;background:#fff}
th,td{border:1px solid #d0d7de;padding:3px 9px;text-align:right;white-space:nowrap}
th{background:#f0f3f6;white-space:normal;min-width:4em} td.t,th:first-child{text-align:left}
td.t{white-space:normal;overflow-wrap:anywhere;min-width:6em}
.scroll{overflow-x:auto;max-width:100%} figure{margin:10px 0 18px} figure h3{margin-top:8px}
img{max-width:100%;height:auto;border:1px solid #e1e4e8;background:#fff}
h2,h3,p,.meta,figcaption,.caption{overflow-wrap:anywhere}
figcaption,.caption{color:#57606a;font-size:.88em;margin-top:3px}
"""


def _td(cell: str, numeric_table: bool = True) -> str:
    """A cell; words are left-aligned, numbers right-aligned (so digits line up)."""
    numeric = cell[:1].isdigit() or cell[:1] in "-−—∞+." or cell[:2] == "±"
    if numeric and numeric_table:
        return f"<td>{html.escape(cell)}</td>"
    return f'<td class="t">{html.escape(cell)}</td>'


def _table_html(table: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = "".join(
        "<tr>" + "".join(_td(cell, table.numeric) for cell in row) + "</tr>" for row in table.rows
    )
    caption = f'<p class="caption">{html.escape(table.caption)}</p>' if table.caption else ""
    return (
        f"<h3>{html.escape(table.title)}</h3>"
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>{caption}"
    )


def _figure_html(figure: Figure) -> str:
    data = base64.b64encode(figure.png).decode("ascii")
    caption = html.escape(figure.caption or figure.title)
    return (
        f"<figure><h3>{html.escape(figure.title)}</h3>"
        f'<img src="data:image/png;base64,{data}" alt="{html.escape(figure.title)}">'
        f"<figcaption>{caption}</figcaption></figure>"
    )


def _block_html(block: Text | Table | Figure) -> str:
    if isinstance(block, Table):
        return _table_html(block)
    if isinstance(block, Figure):
        return _figure_html(block)
    return f"<p>{html.escape(block.text)}</p>"


def _section_html(section: Section, heading: bool = True) -> str:
    head = f"<h2>{html.escape(section.title)}</h2>" if heading else ""
    blocks = "".join(_block_html(b) for b in section.blocks)
    return f'<section id="{section.key}">{head}{blocks}</section>'


def to_html(title: str, meta: Sequence[str], sections: Sequence[Section]) -> str:
    """The whole page as one string (UTF-8, no external resources).

    An ``answer`` section comes right under the title, without a heading of its own
    (its figure is the first thing a reader sees); the navigation and the page's
    metadata follow it."""
    lead = [s for s in sections[:1] if s.key == "answer"]
    rest = sections[len(lead) :]
    nav = "".join(f'<a href="#{s.key}">{html.escape(s.title)}</a>' for s in rest)
    meta_html = "".join(f'<div class="meta">{html.escape(m)}</div>' for m in meta)
    body = "".join(_section_html(s) for s in rest)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>"
        f"<body><main><h1>{html.escape(title)}</h1>"
        + "".join(_section_html(s, heading=False) for s in lead)
        + f"<nav>{nav}</nav>{meta_html}{body}</main></body></html>\n"
    )


def _md_cell(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")


def _table_md(table: Table) -> str:
    lines = [f"### {table.title}", ""]
    lines.append("| " + " | ".join(_md_cell(c) for c in table.columns) + " |")
    lines.append("|" + "|".join(" --- " for _ in table.columns) + "|")
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows]
    if table.caption:
        lines += ["", table.caption]
    return "\n".join(lines)


def to_markdown(
    title: str, meta: Sequence[str], sections: Sequence[Section], html_name: str
) -> str:
    """A Markdown summary: every table and text; figures named, pointing at the HTML."""
    parts = [f"# {title}", "", *[f"- {m}" for m in meta], ""]
    for s in sections:
        parts += [f"## {s.title}", ""]
        for block in s.blocks:
            if isinstance(block, Table):
                parts += [_table_md(block), ""]
            elif isinstance(block, Figure):
                parts += [f"*Figure: {block.title}* (see `{html_name}`)", ""]
            else:
                parts += [block.text, ""]
    return "\n".join(parts).rstrip() + "\n"
