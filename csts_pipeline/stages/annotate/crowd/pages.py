"""The HIT pages: one HTML template per crowd stage (package data under `templates/`), rendered at export into a
single self-contained `template.html` (stylesheet, script and guideline partials inlined; no external resources)
whose `${column}` placeholders are exactly the columns of the stage's `hits.csv`, so MTurk fills it per row.

The Label Studio configs (`templates/label_studio/<stage>.xml`) are rendered here too, so both tools show the one
set of guidelines: a guidelines partial (`_guide_*.html`, a `<dialog>` the page opens) included into a config
becomes a Label Studio panel holding the same HTML in a HyperText.

Template syntax, resolved here and nowhere else: `<!--#include NAME-->` inlines the partial `templates/NAME`
(partials may include others); `<!--#repeat KIND-->...<!--#end-->` repeats its body once per item of that kind
(the qualification test), with `__N__` the item's number from 1; `<!--#example PATH-->` and `<!--#examples
KIND-->` put in the guideline examples of `templates/guide_examples.json` (stages/annotate/crowd/guide.py). `fill`
substitutes a hits.csv row as MTurk does, HTML-escaped, for previews and the browser tests."""

from __future__ import annotations

import html
import math
import re
from importlib import resources
from pathlib import Path
from xml.sax.saxutils import quoteattr

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.shards import write_atomic
from csts_pipeline.stages.annotate.crowd import guide
from csts_pipeline.stages.annotate.crowd.gold_set import FLAG_ERROR, MAX_RATING_ERROR

STAGES = ("qualification", "conditions", "ratings", "bws")
PAGE = "template.html"
_INCLUDE = re.compile(r"<!--#include ([\w./-]+)-->")
_REPEAT = re.compile(r"[ \t]*<!--#repeat (\w+)-->\n?(.*?)[ \t]*<!--#end-->\n?", re.S)
PLACEHOLDER = re.compile(r"\$\{(\w+)\}")


def _partial(name: str) -> str:
    return (
        resources.files("csts_pipeline.stages.annotate")
        .joinpath("templates", *name.split("/"))
        .read_text(encoding="utf-8")
    )


def render(stage: str, repeats: dict[str, int] | None = None) -> str:
    """The stage's page with its partials inlined, its repeated blocks expanded (`repeats`: kind -> count), its
    examples filled in and its guidelines' version stamped."""
    if stage not in STAGES:
        raise UserError(f"no page for stage {stage!r} (pages: {', '.join(STAGES)})")
    page = render_template(f"{stage}.html", repeats)
    if stage == "qualification":
        page = _test_figures(page, repeats or {})
    return guide.stamp_version(page)


def _test_figures(page: str, repeats: dict[str, int]) -> str:
    """The qualification page's time and scoring: its item counts, a time estimate (90 s to write two conditions,
    30 s to rate) and the import's default pass rule, so the worker knows what the test asks before starting."""
    writes, rates = repeats.get("write", 0), repeats.get("rate", 0)
    figures = {
        "__MINUTES__": str(max(1, math.ceil(1.5 * writes + 0.5 * rates))),
        "__WRITE_ITEMS__": str(writes),
        "__RATE_ITEMS__": str(rates),
        "__MAX_RATING_ERROR__": f"{MAX_RATING_ERROR:g}",
        "__FLAG_ERROR__": f"{FLAG_ERROR:g}",
    }
    for mark, value in figures.items():
        page = page.replace(mark, value)
    return page


def render_template(name: str, repeats: dict[str, int] | None = None) -> str:
    """Any template under `templates/` (a page, or `label_studio/<stage>.xml`) with its includes, examples and
    repeated blocks resolved; an HTML guidelines partial included into an XML config comes in as a Label Studio
    panel holding its HTML (tables as tables)."""
    into_xml = name.endswith(".xml")

    def include(match: re.Match) -> str:
        partial = _INCLUDE.sub(include, _partial(match.group(1))).rstrip("\n")  # a partial may include others
        return guide_panel(guide.fill_examples(partial)) if into_xml and match.group(1).endswith(".html") else partial

    text = guide.fill_examples(_INCLUDE.sub(include, _partial(name)))
    counts = repeats or {}

    def expand(match: re.Match) -> str:
        body = match.group(2)
        return "".join(body.replace("__N__", str(n)) for n in range(1, counts.get(match.group(1), 0) + 1))

    return _REPEAT.sub(expand, text)


_DIALOG = re.compile(
    r'<dialog class="guide" id="([\w-]+)"[^>]*>\s*<h2[^>]*>(.*?)</h2>(.*?)<p class="close">.*?</dialog>', re.S
)


def guide_parts(partial: str) -> tuple[str, str, str]:
    """A guidelines partial's dialog id, heading and body (its HTML, without the close button)."""
    match = _DIALOG.search(partial)
    if match is None:
        raise UserError('a guidelines partial must be one <dialog class="guide" id=...> with an <h2> heading')
    return match.group(1), match.group(2).strip(), match.group(3).strip()


def guide_panel(partial: str) -> str:
    """A guidelines partial as Label Studio shows it: a folding panel headed by its heading, holding its HTML in
    a HyperText (paragraphs and real tables, styled by the config's own Style block)."""
    ident, heading, body = guide_parts(partial)
    name = ident.replace("-", "_")
    html_value = quoteattr(f'<div class="csts-guide">{" ".join(body.split())}</div>')
    return (
        f"<Collapse>\n    <Panel value={quoteattr(heading + ' (click to open)')}>\n"
        f'      <HyperText name="{name}" value={html_value} inline="true" selectionEnabled="false"/>\n'
        "    </Panel>\n  </Collapse>"
    )


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
