"""Who a workers file qualifies, by one rule when it lists a worker more than once (docs/annotate.md,
"Qualification"): the most recent dated manual verdict wins; without dates, a worker whose rows disagree (a
manual verdict pass and fail, or, without verdicts, qualified true and false) is not qualified, and the import
says so in one line naming the worker. A file is never read by "the last row wins" or "the first row wins",
which would let a disqualified worker in by the order of its lines."""

from __future__ import annotations

import csv
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.annotate.crowd.results import one_line

log = logging.getLogger(__name__)
VERDICTS = ("pass", "fail")
DATE = "verdict_date"  # optional: when the requester gave the row's manual_verdict (ISO 8601)


@dataclass(frozen=True)
class Entry:
    """One row of a workers file: its number (the header is row 1), the `qualified` flag (None when the file
    has no such column), the manual verdict (empty: none) and when it was given (None: undated)."""

    row: int
    qualified: bool | None
    verdict: str
    date: datetime | None


def read_csv(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle)
            missing = [name for name in required if name not in (reader.fieldnames or [])]
            if missing:
                raise UserError(f"{path}: missing column(s) {', '.join(missing)}; see docs/annotate.md")
            return list(reader)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise UserError(f"{path}: not a readable CSV ({exc})") from None


def read_entries(
    path: Path, required: tuple[str, ...], parse_flag: Callable[[Any], bool | None]
) -> dict[str, list[Entry]]:
    """Every row of the file by worker id, checked: a verdict is pass, fail or empty, a date ISO 8601, a
    `qualified` (when required) true or false."""
    entries: dict[str, list[Entry]] = {}
    for number, row in enumerate(read_csv(path, required), start=2):
        verdict = one_line(row.get("manual_verdict")).casefold()
        if verdict and verdict not in VERDICTS:
            raise UserError(f"{path}: row {number}: manual_verdict {verdict!r} is not pass, fail or empty")
        flag = parse_flag(row["qualified"]) if "qualified" in required else None
        if "qualified" in required and flag is None:
            raise UserError(f"{path}: row {number}: qualified {row['qualified']!r} is not true or false")
        entry = Entry(number, flag, verdict, _date(path, number, row))
        entries.setdefault(one_line(row["worker_id"]), []).append(entry)
    return entries


def _date(path: Path, number: int, row: dict[str, str]) -> datetime | None:
    text = one_line(row.get(DATE))
    if not text:
        return None
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        raise UserError(f"{path}: row {number}: {DATE} {text!r} is not an ISO 8601 date or time") from None
    return found.replace(tzinfo=None) if found.tzinfo is None else found.astimezone().replace(tzinfo=None)


def decide(entries: list[Entry]) -> tuple[str, str | None]:
    """A worker's standing from their rows: `pass` or `fail` (a manual verdict), `qualified` or `not_qualified`
    (the flags), and why the rows contradict each other (None when they do not); a contradiction is `fail`."""
    verdicts = [e for e in entries if e.verdict]
    dated = [e for e in verdicts if e.date is not None]
    if dated:
        latest = max(e.date for e in dated)
        verdicts = [e for e in dated if e.date == latest]
    if verdicts:
        found = {e.verdict for e in verdicts}
        if len(found) == 1:
            return found.pop(), None
        return "fail", f"manual_verdict pass and fail{' on the same date' if dated else ', undated'}"
    flags = {e.qualified for e in entries if e.qualified is not None}
    if len(flags) > 1:
        return "fail", "qualified true and false"
    return ("qualified" if flags == {True} else "not_qualified"), None


def standings(path: Path, entries: dict[str, list[Entry]]) -> dict[str, str]:
    """Every worker's standing (decide), each contradiction said in one line naming the worker and rows."""
    found = {}
    for worker, rows in entries.items():
        found[worker], why = decide(rows)
        if why is not None:
            numbers = ", ".join(str(e.row) for e in rows)
            log.warning(
                "%s: worker %s is listed both ways (%s, rows %s): not qualified; date the manual verdicts "
                "(%s) to let the latest decide",
                path,
                worker,
                why,
                numbers,
                DATE,
            )
    return found
