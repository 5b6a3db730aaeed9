"""The HIT pages: one HTML template per crowd stage (package data under `templates/`), rendered at export into a
single self-contained `template.html` (stylesheet, script and guideline partials inlined; no external resources)
whose `${column}` placeholders are exactly the columns of the stage's `hits.csv`, so MTurk fills it per row.

The Label Studio configs (`templates/label_studio/<stage>.xml`) are rendered here too, so both tools show the one
set of guidelines: a guidelines partial (`_guide_*.html`) included into a config becomes a Label Studio panel of
its text, one block per paragraph and table row.

Template syntax, resolved here and nowhere else: `<!--#include NAME-->` inlines the partial `templates/NAME`
(partials may include others); `<!--#repeat KIND-->...<!--#end-->` repeats its body once per item of that kind
(the qualification test), with `__N__` the item's number from 1. `fill` substitutes a hits.csv row as MTurk
does, HTML-escaped, for previews and
the browser tests."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from importlib import resources
from pathlib import Path
from xml.sax.saxutils import quoteattr

from csts_pipeline.frame.errors import UserError
from csts_pipeline.frame.shards import write_atomic

STAGES = ("qualification", "conditions", "ratings", "bws")
PAGE = "template.html"
_INCLUDE = re.compile(r"<!--#include ([\w.-]+)-->")
_REPEAT = re.compile(r"[ \t]*<!--#repeat (\w+)-->\n?(.*?)[ \t]*<!--#end-->\n?", re.S)
PLACEHOLDER = re.compile(r"\$\{(\w+)\}")


def _partial(name: str) -> str:
    return (
        resources.files("csts_pipeline.stages.annotate")
        .joinpath("templates", *name.split("/"))
        .read_text(encoding="utf-8")
    )


def render(stage: str, repeats: dict[str, int] | None = None) -> str:
    """The stage's page with its partials inlined and its repeated blocks expanded (`repeats`: kind -> count)."""
    if stage not in STAGES:
        raise UserError(f"no page for stage {stage!r} (pages: {', '.join(STAGES)})")
    return render_template(f"{stage}.html", repeats)


def render_template(name: str, repeats: dict[str, int] | None = None) -> str:
    """Any template under `templates/` (a page, or `label_studio/<stage>.xml`) with its includes and repeated
    blocks resolved; an HTML partial included into an XML config comes in as a Label Studio panel of its text."""
    into_xml = name.endswith(".xml")

    def include(match: re.Match) -> str:
        partial = _INCLUDE.sub(include, _partial(match.group(1))).rstrip("\n")  # a partial may include others
        return guide_panel(partial) if into_xml and match.group(1).endswith(".html") else partial

    text = _INCLUDE.sub(include, _partial(name))
    counts = repeats or {}

    def expand(match: re.Match) -> str:
        body = match.group(2)
        return "".join(body.replace("__N__", str(n)) for n in range(1, counts.get(match.group(1), 0) + 1))

    return _REPEAT.sub(expand, text)


class _GuideText(HTMLParser):
    """The text of a guidelines partial in blocks: its summary, each paragraph, each table row (cells joined by
    ` · `); quotations keep their quotation marks."""

    BLOCKS = ("summary", "p", "tr")

    def __init__(self) -> None:
        super().__init__()
        self.blocks: list[str] = []
        self.parts: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self.BLOCKS:
            self.parts = []
        elif self.parts is not None and tag in ("td", "th"):
            self.parts.append("\0")
        elif self.parts is not None and tag == "q":
            self.parts.append("\u201c")

    def handle_endtag(self, tag: str) -> None:
        if self.parts is not None and tag == "q":
            self.parts.append("\u201d")
        elif self.parts is not None and tag in self.BLOCKS:
            cells = (" ".join(cell.split()) for cell in "".join(self.parts).split("\0"))
            text = " · ".join(cell for cell in cells if cell)
            if text:
                self.blocks.append(text)
            self.parts = None

    def handle_data(self, data: str) -> None:
        if self.parts is not None:
            self.parts.append(data)


def guide_blocks(partial: str) -> list[str]:
    """A guidelines partial's text, block by block (the first its `<summary>`, the heading)."""
    parser = _GuideText()
    parser.feed(partial)
    parser.close()
    return parser.blocks


def guide_panel(partial: str) -> str:
    """A guidelines partial as Label Studio shows it: a folding panel headed by its summary, a line per block."""
    heading, *blocks = guide_blocks(partial)
    lines = [f"<Collapse>\n    <Panel value={quoteattr(heading)}>"]
    lines += [f'      <Header size="6" value={quoteattr(block)}/>' for block in blocks]
    return "\n".join([*lines, "    </Panel>\n  </Collapse>"])


def placeholders(page: str) -> list[str]:
    """The `${column}` names a page uses, in order of first use."""
    return list(dict.fromkeys(PLACEHOLDER.findall(page)))


def write_page(folder: Path, stage: str, columns: list[str], repeats: dict[str, int] | None = None) -> str:
    """Render the stage's page into `folder/template.html`, refusing a page whose placeholders are not exactly
    the hits.csv `columns` (MTurk rejects a batch with unknown variables and would leave others unshown)."""
    page = render(stage, repeats)
    used = placeholders(page)
    if sorted(used) != sorted(columns):
        raise UserError(
            f"{stage} page: placeholders {sorted(set(used) - set(columns))} not in hits.csv, hits.csv columns "
            f"{sorted(set(columns) - set(used))} not shown"
        )
    blob = page.encode()
    write_atomic(folder / PAGE, lambda handle: handle.write(blob))
    return PAGE


def fill(page: str, row: dict[str, str]) -> str:
    """The page as MTurk shows it for one hits.csv `row`: each `${column}` replaced by its value, HTML-escaped."""

    def value(match: re.Match) -> str:
        name = match.group(1)
        if name not in row:
            raise UserError(f"page placeholder ${{{name}}} has no column in the row ({', '.join(row)})")
        return html.escape(str(row[name]))

    return PLACEHOLDER.sub(value, page)
