"""The qualification gold set and the checks a written condition must pass: read by the qualification test
(steps/qualification.py), the hidden controls (hidden_gold.py, controls.py) and the HIT pages' constants."""

from __future__ import annotations

import csv
import re
from importlib import resources
from pathlib import Path
from typing import Any

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.annotate.crowd.results import one_line, parse_rating, same_text

GOLD_COLUMNS = ("item_id", "kind", "sentence1", "sentence2", "condition", "gold_rating")
KINDS = ("write", "rate")
NOT_PERTINENT = "not_pertinent"
MAX_CONDITION_CHARS = 80  # also in templates/_hit.js
MAX_RATING_ERROR = 1.0
FLAG_ERROR = 4.0  # the width of the 1-5 scale
_SENTENCE = re.compile(r"\bsentences?\b")  # as the page's check


def default_gold() -> Path:
    return Path(str(resources.files("csts_pipeline.stages.annotate").joinpath("gold", "qualification_gold.csv")))


def read_gold(path: Path) -> list[dict[str, Any]]:
    """The gold items, checked: unique ids, a known kind, both sentences; rate items with a condition and a gold
    rating 1-5 or `not_pertinent`; at least one item of each kind."""
    if not path.is_file():
        raise UserError(f"{path}: gold file not found")
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle)
            missing = [name for name in GOLD_COLUMNS if name not in (reader.fieldnames or [])]
            if missing:
                raise UserError(f"{path}: missing column(s) {', '.join(missing)} (expected {', '.join(GOLD_COLUMNS)})")
            items = [{k: one_line(v) for k, v in row.items() if k} for row in reader]
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); save it as UTF-8") from None
    except csv.Error as exc:
        raise UserError(f"{path}: not a readable CSV ({exc})") from None
    seen: set[str] = set()
    for number, item in enumerate(items, start=2):
        problem = _gold_problem(item, seen)
        if problem:
            raise UserError(f"{path}: row {number}: {problem}")
        seen.add(item["item_id"])
    for kind in KINDS:
        if not any(item["kind"] == kind for item in items):
            raise UserError(f"{path}: no {kind} item (a test needs both condition writing and rating)")
    return items


def _gold_problem(item: dict[str, Any], seen: set[str]) -> str | None:
    if not item["item_id"] or item["item_id"] in seen:
        return f"item_id {item['item_id']!r} is empty or repeated"
    if item["kind"] not in KINDS:
        return f"kind {item['kind']!r} is not write or rate"
    if not item["sentence1"] or not item["sentence2"]:
        return "both sentences are needed"
    if item["kind"] == "rate":
        if not item["condition"]:
            return "a rate item needs a condition"
        if item["gold_rating"] != NOT_PERTINENT and parse_rating(item["gold_rating"]) is None:
            return f"gold_rating {item['gold_rating']!r} is not 1-5 or {NOT_PERTINENT}"
    return None


def condition_problems(high: str, low: str, sentence1: str, sentence2: str) -> list[str]:
    """The page's automatic checks of two written conditions (templates/_hit.js), by name."""
    found = []
    sentences = {one_line(s).casefold() for s in (sentence1, sentence2)}
    for kind, text in (("high", high), ("low", low)):
        value = one_line(text)
        if not value:
            found.append(f"empty_condition_{kind}")
        elif _SENTENCE.search(value.casefold()):
            found.append(f"mentions_sentence_{kind}")
        elif value.casefold() in sentences:
            found.append(f"copies_sentence_{kind}")
        elif len(value) > MAX_CONDITION_CHARS:
            found.append(f"too_long_{kind}")
    if one_line(high) and same_text(one_line(high), one_line(low)):
        found.append("same_conditions")
    return found
