"""The HIT pages: one HTML template per crowd stage (package data under `templates/`), rendered at export into a
single self-contained `template.html` (stylesheet, script and guideline partials inlined; no external resources)
whose `${column}` placeholders are exactly the columns of the stage's `hits.csv`, so MTurk fills it per row.

Template syntax, resolved here and nowhere else: `<!--#include NAME-->` inlines the partial `templates/NAME`;
`<!--#repeat KIND-->...<!--#end-->` repeats its body once per item of that kind (the qualification test), with
`__N__` the item's number from 1. `fill` substitutes a hits.csv row as MTurk does, HTML-escaped, for previews and
the browser tests."""

from __future__ import annotations

import html
import re
from importlib import resources
from pathlib import Path

from pipeline.errors import UserError
from pipeline.shards import write_atomic

STAGES = ("qualification", "conditions", "ratings", "bws")
PAGE = "template.html"
_INCLUDE = re.compile(r"<!--#include ([\w.-]+)-->")
_REPEAT = re.compile(r"<!--#repeat (\w+)-->\n?(.*?)<!--#end-->\n?", re.S)
PLACEHOLDER = re.compile(r"\$\{(\w+)\}")


def _partial(name: str) -> str:
    return resources.files("stages.annotate").joinpath("templates", name).read_text(encoding="utf-8")


def render(stage: str, repeats: dict[str, int] | None = None) -> str:
    """The stage's page with its partials inlined and its repeated blocks expanded (`repeats`: kind -> count)."""
    if stage not in STAGES:
        raise UserError(f"no page for stage {stage!r} (pages: {', '.join(STAGES)})")
    text = _INCLUDE.sub(lambda m: _partial(m.group(1)).rstrip("\n"), _partial(f"{stage}.html"))
    counts = repeats or {}

    def expand(match: re.Match) -> str:
        body = match.group(2)
        return "".join(body.replace("__N__", str(n)) for n in range(1, counts.get(match.group(1), 0) + 1))

    return _REPEAT.sub(expand, text)


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
