"""One results row as every crowd platform's reader builds it (crowd/platform.py), the problems that leave a row
out, and the parsers of its answers (ratings, flags, conditions) that the screens and the gold checks share."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from csts_pipeline.stages.annotate.layout import RATING_SCALE

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


def one_line(value: Any) -> str:
    """A results field as one line of text: missing is empty, inner whitespace runs become one space."""
    return "" if value is None else " ".join(str(value).split())


@dataclass
class Problem:
    """One reason a results row was excluded; `row` counts the header as row 1 (CSV) or is the line (JSONL)."""

    file: str
    row: int
    id: str
    problem: str
    detail: str


@dataclass
class ResultRow:
    """One results row with plain field names, and where it came from (for the report)."""

    file: Path
    row: int
    fields: dict[str, Any]
    posted: dict[str, Any] = field(default_factory=dict)  # Answer.x where Input.x is also given (fields has that)

    def text(self, name: str) -> str:
        return one_line(self.fields.get(name))

    def where(self) -> str:
        return f"{self.file.name}:{self.row}"


# ------------------------------------------------------------------------------------------- reading answers


def same_text(a: str, b: str) -> bool:
    """Whether two conditions are the same, ignoring case, punctuation, symbols and spaces (as the page's check)."""
    return condition_key(a) == condition_key(b)


def condition_key(text: str) -> str:
    """A condition as compared: case folded, punctuation and symbols read as spaces, spaces collapsed."""
    folded = "".join(" " if unicodedata.category(c)[0] in "PS" else c for c in text.casefold())
    return " ".join(folded.split())


def parse_flag(value: Any) -> bool | None:
    """A checkbox-like answer: true/false, 1/0, yes/no, on/off or empty (unchecked); None when unreadable."""
    if isinstance(value, bool):
        return value
    text = one_line(value).casefold()
    return True if text in _TRUE else False if text in _FALSE else None


def parse_rating(value: Any) -> int | None:
    """An integer on the rating scale (`4` and `4.0` alike); None otherwise."""
    text = one_line(value)
    try:
        number = float(text)
    except ValueError:
        return None
    low, high = RATING_SCALE
    return int(number) if number.is_integer() and low <= number <= high else None
