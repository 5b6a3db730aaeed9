"""The licence of a published dataset, as the Hugging Face Hub reads it: one of the identifiers its cards take
(`resources/hub_licenses.txt`, package data copied from the Hub's documentation), so that the card's `license:`
field is one the Hub shows and filters by, not free text it ignores."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from csts_pipeline.pipeline.errors import UserError

LIST = "hub_licenses.txt"
OTHER = "other"


@cache
def hub_licenses() -> tuple[str, ...]:
    """The identifiers the Hub accepts, in the file's order (comments and blank lines left out)."""
    text = (resources.files("csts_pipeline.stages.annotate") / "resources" / LIST).read_text(encoding="utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


def hub_license(given: str) -> str:
    """`given` as the Hub's identifier: case folded and spaces or underscores made hyphens (`CC BY 4.0` is
    `cc-by-4.0`); anything else is a UserError that says what to give instead."""
    normal = re.sub(r"[\s_]+", "-", given.strip()).casefold()
    if normal in hub_licenses():
        return normal
    close = [name for name in hub_licenses() if normal and (normal in name or name in normal)][:5]
    hint = f" (close: {', '.join(close)})" if close else ""
    raise UserError(
        f"--license {given!r}: not a licence identifier the Hugging Face Hub accepts{hint}; give one of its ids "
        f"(e.g. cc-by-4.0, cc-by-sa-4.0, mit, apache-2.0; the list: stages/annotate/resources/{LIST}), or "
        f"--license {OTHER} and add the licence's text to the folder"
    )
