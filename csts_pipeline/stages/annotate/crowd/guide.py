"""The guideline examples, kept in one data file (`templates/guide_examples.json`) so that the HIT pages, the Label
Studio configs and the qualification gold cannot drift apart: a page or config names an example with
`<!--#example PATH-->` (a dotted path into the file, put in HTML-escaped) and a table of them with
`<!--#examples KIND-->` (conditions, ratings, bws). tests/annotate/test_guide_examples.py checks the examples against
their own rules and against the gold set.

A page's guidelines carry a version, a hash of their rendered text: the page remembers in localStorage that a
worker has seen the guide of that version, so a changed guide opens by itself again."""

from __future__ import annotations

import hashlib
import json
import re
from functools import cache
from html import escape
from importlib import resources
from typing import Any

from csts_pipeline.pipeline.errors import UserError

EXAMPLES_FILE = "guide_examples.json"
_EXAMPLE = re.compile(r"<!--#example ([\w.]+)-->")
_EXAMPLES = re.compile(r"<!--#examples (\w+)-->")
_GUIDES = re.compile(r"<dialog class=\"guide\".*?</dialog>", re.S)
VERSION_MARK = "__GUIDE_VERSION__"


@cache
def examples() -> dict[str, Any]:
    """The packaged examples file, parsed once."""
    text = (
        resources.files("csts_pipeline.stages.annotate")
        .joinpath("templates", EXAMPLES_FILE)
        .read_text(encoding="utf-8")
    )
    return json.loads(text)


def example(path: str) -> Any:
    """The value at a dotted path of the examples (`conditions.rules.0.bad`); a wrong path is a UserError."""
    value: Any = examples()
    for key in path.split("."):
        try:
            value = value[int(key)] if isinstance(value, list) else value[key]
        except (KeyError, IndexError, ValueError):
            raise UserError(f"{EXAMPLES_FILE}: no example at {path!r}") from None
    return value


def _conditions_table(found: dict[str, Any]) -> str:
    rows = [
        f'<tr><th scope="row">{escape(r["rule"])}</th>'
        f'<td class="ok" data-label="Good">{escape(r["good"]["condition"])}</td>'
        f'<td class="no" data-label="Bad">{escape(r["bad"])}</td><td data-label="Why">{escape(r["why"])}</td></tr>'
        for r in found["rules"]
    ]
    head = '<tr><th scope="col">Rule</th><th scope="col">Good</th><th scope="col">Bad</th><th scope="col">Why</th></tr>'
    return "\n".join(["<table>", head, *rows, "</table>"])


def _ratings_table(found: dict[str, Any]) -> str:
    rows = [
        f"<tr><td>{escape(e['condition'])}</td>"
        f'<td class="{"ok" if e["right"] else "no"}" data-label="Answer">{escape(e["answer"])}'
        f'{"" if e["right"] else " (wrong)"}</td><td data-label="Why">{escape(e["why"])}</td></tr>'
        for e in found["examples"]
    ]
    head = '<tr><th scope="col">Condition</th><th scope="col">Answer</th><th scope="col">Why</th></tr>'
    return "\n".join(["<table>", head, *rows, "</table>"])


def _bws_table(found: dict[str, Any]) -> str:
    rows = [f"<tr><td>{escape(e['condition'])}</td><td>{escape(e['verdict'])}</td></tr>" for e in found["examples"]]
    head = '<tr><th scope="col">Condition</th><th scope="col">The pair under it</th></tr>'
    return "\n".join(["<table>", head, *rows, "</table>"])


TABLES = {"conditions": _conditions_table, "ratings": _ratings_table, "bws": _bws_table}


def fill_examples(text: str) -> str:
    """`text` with its example marks replaced by the examples (single ones escaped, tables as HTML)."""

    def table(match: re.Match) -> str:
        kind = match.group(1)
        if kind not in TABLES:
            raise UserError(f"{EXAMPLES_FILE}: no table of examples {kind!r} (tables: {', '.join(TABLES)})")
        return TABLES[kind](examples()[kind])

    text = _EXAMPLES.sub(table, text)
    return _EXAMPLE.sub(lambda match: escape(str(example(match.group(1)))), text)


def stamp_version(page: str) -> str:
    """The page with its guide version mark replaced by a short hash of its guidelines' rendered text."""
    guides = "".join(_GUIDES.findall(page))
    return page.replace(VERSION_MARK, hashlib.blake2b(guides.encode(), digest_size=6).hexdigest())
