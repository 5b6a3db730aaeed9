"""What the crowd sends back: results files read and screened row by row, for the imports.

Each results file is read by the crowd platform whose file it is (crowd/platform.py: an MTurk batch-results CSV
or a plain CSV/JSONL by `mturk`, a Label Studio JSON export by `label_studio`) into the same `ResultRow`s. Every
row with a problem is left out and listed as a `Problem`, never dropped silently; the import steps write those
problems to `report.csv`."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.records import file_fingerprint, fingerprint
from csts_pipeline.pipeline.schemas import REPORT_SCHEMA
from csts_pipeline.stages.annotate.crowd.files import write_csv
from csts_pipeline.stages.annotate.crowd.platform import reader_of
from csts_pipeline.stages.annotate.crowd.results import (
    Problem,
    ResultRow,
    one_line,
    parse_flag,
    parse_rating,
    same_text,
)
from csts_pipeline.stages.annotate.labels.agreement import Rating

CONDITION_FIELDS = ("task_id", "condition_high", "condition_low")
RATING_FIELDS = ("item_id", "worker_id", "rating")
BWS_FIELDS = ("tuple_id", "worker_id", "best", "worst")
BWS_POSITIONS = 4


def read_results(path: Path, required: tuple[str, ...]) -> tuple[list[ResultRow], list[Problem]]:
    """The rows of a results file, read by the crowd platform whose file it is (crowd/platform.py); rows it
    cannot use come back as problems. A file without the `required` fields is a UserError."""
    if not path.is_file():
        raise UserError(f"{path}: results file not found")
    rows, problems, columns = reader_of(path).read_results(path, required)
    return _checked(path, required, columns, rows, problems)


def _checked(
    path: Path, required: tuple[str, ...], columns: set[str], rows: list[ResultRow], problems: list[Problem]
) -> tuple[list[ResultRow], list[Problem]]:
    """The rows and problems read, when the file has every `required` field; a UserError naming them otherwise."""
    missing = [name for name in required if name not in columns]
    if missing:
        found = ", ".join(sorted(columns)[:8]) or "none"
        raise UserError(
            f"{path}: missing field(s) {', '.join(missing)} (as Input./Answer. columns of an MTurk batch-results "
            f"CSV or plain names; found: {found}); see docs/annotate.md"
        )
    return rows, problems


def results_fingerprint(results: list[Path]) -> str:
    """The results files' contents in order (order matters: the first valid answer of a task wins)."""
    for path in results:
        if not path.is_file():
            raise UserError(f"{path}: results file not found")
    return fingerprint([file_fingerprint(path) for path in results])


class Qualified(NamedTuple):
    """The workers who passed the qualification (`steps.qualification`), and the file that says so."""

    workers: frozenset[str]
    file: Path


class Screen:
    """Per-row checks shared by the imports (rejected assignments, missing/unknown ids, duplicate assignments,
    workers not qualified), and the problems found so far."""

    def __init__(
        self,
        known: dict[str, int],
        id_field: str,
        tasks_file: Path,
        qualified: Qualified | None = None,
        blocked: frozenset[str] = frozenset(),
    ):
        self.known = known
        self.blocked = blocked
        self.id_field = id_field
        self.tasks_file = tasks_file
        self.qualified = qualified
        self.problems: list[Problem] = []
        self.assignments: dict[str, str] = {}
        self.rows_read = 0

    def add(self, row: ResultRow, problem: str, detail: str) -> None:
        self.problems.append(Problem(str(row.file), row.row, row.text(self.id_field), problem, detail))

    def check(self, row: ResultRow) -> list[str]:
        """Problems of the row's id and assignment, recorded; returns their names."""
        self.rows_read += 1
        before = len(self.problems)
        if row.text("assignment_status").casefold() == "rejected":
            self.add(row, "rejected_assignment", "the assignment was rejected on the crowd platform")
        if self.qualified is not None and row.text("worker_id") not in self.qualified.workers:
            who = row.text("worker_id") or "(no worker id)"
            self.add(row, "not_qualified", f"worker {who} is not qualified in {self.qualified.file}")
        if row.text("worker_id") in self.blocked:
            self.add(row, "blocked", f"worker {row.text('worker_id')} failed the hidden gold test (blocklist.csv)")
        task = row.text(self.id_field)
        posted = one_line(row.posted.get(self.id_field))
        if posted and posted != task:  # a blank posted id (a page that posts none) leaves the HIT's
            self.add(row, "id_mismatch", f"answer posted for {self.id_field} {posted!r} in the HIT of {task!r}")
        if not task:
            self.add(row, "missing_id", f"no {self.id_field}")
        elif task not in self.known:
            self.add(row, "unknown_id", f"{self.id_field} {task!r} is not in {self.tasks_file}")
        assignment = row.text("assignment_id")
        if assignment:
            if assignment in self.assignments:
                self.add(row, "duplicate_assignment", f"assignment {assignment} also at {self.assignments[assignment]}")
            else:
                self.assignments[assignment] = row.where()
        return [p.problem for p in self.problems[before:]]

    def write_report(self, path: Path) -> None:
        write_csv(pa.Table.from_pylist([vars(p) for p in self.problems], schema=REPORT_SCHEMA), path)

    def summary(self) -> dict[str, int]:
        return dict(Counter(p.problem for p in self.problems).most_common())

    def excluded_rows(self) -> int:
        return len({(p.file, p.row) for p in self.problems})

    def nothing_valid(self, results: list[Path], what: str) -> UserError:
        """The error when no row passed: the counts per problem and the first problem, in one line, since
        nothing (not even the report) is written then."""
        counts = ", ".join(f"{name} {count}" for name, count in self.summary().items()) or "no rows"
        if self.problems:
            first = self.problems[0]
            counts += f"; first: {Path(first.file).name}:{first.row} {first.problem}: {first.detail}"
        return UserError(f"{results[0]}: no valid {what} ({counts}); nothing was written")


# -------------------------------------------------------------------------------------- condition-writing results


def screen_conditions(
    tasks: list[dict[str, Any]], results: list[Path], tasks_file: Path, qualified: Qualified | None = None
) -> tuple[Screen, dict[int, ResultRow]]:
    """Every condition-writing results row checked; the first valid answer of each task, by task index."""
    screen = Screen({t["task_id"]: i for i, t in enumerate(tasks)}, "task_id", tasks_file, qualified)
    answers: dict[int, ResultRow] = {}
    for path in results:
        rows, problems = read_results(path, CONDITION_FIELDS)
        screen.problems.extend(problems)
        for row in rows:
            found = screen.check(row)
            high, low = row.text("condition_high"), row.text("condition_low")
            if not high:
                screen.add(row, "empty_condition_high", "no high-similarity condition")
            if not low:
                screen.add(row, "empty_condition_low", "no low-similarity condition")
            if high and low and same_text(high, low):
                screen.add(row, "same_conditions", "condition_high and condition_low are the same text")
            if found or not high or not low or same_text(high, low):
                continue
            task = screen.known[row.text("task_id")]
            if task in answers:
                screen.add(row, "duplicate_task", f"task already answered at {answers[task].where()}")
                continue
            answers[task] = row
    return screen, answers


# ------------------------------------------------------------------------------------------------- rating results


def screen_ratings(
    items: list[dict[str, Any]],
    results: list[Path],
    tasks_file: Path,
    qualified: Qualified | None = None,
    blocked: frozenset[str] = frozenset(),
) -> tuple[Screen, list[Rating]]:
    """Every rating results row checked; the accepted ratings, at most one per worker and item, none by the
    item's condition writer nor by a `blocked` worker."""
    screen = Screen({t["item_id"]: i for i, t in enumerate(items)}, "item_id", tasks_file, qualified, blocked)
    accepted: list[Rating] = []
    seen: dict[tuple[int, str], str] = {}
    for path in results:
        rows, problems = read_results(path, RATING_FIELDS)
        screen.problems.extend(problems)
        for row in rows:
            rating = _rating_answer(screen, row)
            if rating is None:
                continue
            if rating.worker == items[rating.item].get("writer_id"):
                screen.add(row, "own_condition", f"worker {rating.worker} wrote this condition")
                continue
            if (rating.item, rating.worker) in seen:
                where = seen[rating.item, rating.worker]
                screen.add(row, "duplicate_rating", f"worker {rating.worker} already rated this item at {where}")
                continue
            seen[rating.item, rating.worker] = row.where()
            accepted.append(rating)
    return screen, accepted


def _worker(screen: Screen, row: ResultRow, found: list[str]) -> str:
    """The row's worker id; a missing one is recorded as the row's problem."""
    worker = row.text("worker_id")
    if not worker:
        found.append("missing_worker")
        screen.add(row, "missing_worker", "no worker_id")
    return worker


def _rating_answer(screen: Screen, row: ResultRow) -> Rating | None:
    """The row's rating, or None with every problem of the row recorded."""
    found = screen.check(row)
    worker = _worker(screen, row, found)
    flag = parse_flag(row.fields.get("not_pertinent"))
    if flag is None:
        found.append("bad_flag")
        screen.add(row, "bad_flag", f"not_pertinent {row.text('not_pertinent')!r} is not true/false")
    rating = parse_rating(row.fields.get("rating"))
    if not flag and rating is None:
        found.append("bad_rating")
        given = row.text("rating")
        detail = f"rating {given!r} is not an integer from 1 to 5" if given else "no rating"
        screen.add(row, "bad_rating" if given else "missing_rating", detail)
    if found:
        return None
    item = screen.known[row.text("item_id")]
    return Rating(item, worker, row.text("assignment_id"), None if flag else rating, bool(flag))


# --------------------------------------------------------------------------------------------- best-worst results


class Choice(NamedTuple):
    """One accepted best/worst answer: the tuple's index and the chosen positions (0-3) in it."""

    tuple_index: int
    worker: str
    assignment: str
    best: int
    worst: int


def screen_bws(
    tuples: list[dict[str, Any]], results: list[Path], tasks_file: Path, qualified: Qualified | None = None
) -> tuple[Screen, list[Choice]]:
    """Every best-worst results row checked; the accepted answers, at most one per worker and tuple."""
    screen = Screen({t["tuple_id"]: i for i, t in enumerate(tuples)}, "tuple_id", tasks_file, qualified)
    accepted: list[Choice] = []
    seen: dict[tuple[int, str], str] = {}
    for path in results:
        rows, problems = read_results(path, BWS_FIELDS)
        screen.problems.extend(problems)
        for row in rows:
            choice = _bws_answer(screen, row)
            if choice is None:
                continue
            if (choice.tuple_index, choice.worker) in seen:
                where = seen[choice.tuple_index, choice.worker]
                screen.add(row, "duplicate_answer", f"worker {choice.worker} already answered this tuple at {where}")
                continue
            seen[choice.tuple_index, choice.worker] = row.where()
            accepted.append(choice)
    return screen, accepted


def _bws_answer(screen: Screen, row: ResultRow) -> Choice | None:
    """The row's choice, or None with every problem of the row recorded."""
    found = screen.check(row)
    worker = _worker(screen, row, found)
    picks = {}
    for name in ("best", "worst"):
        given = row.text(name)
        picks[name] = parse_position(given)
        if picks[name] is None:
            found.append(name)
            if given:
                screen.add(row, f"bad_{name}", f"{name} {given!r} is not a position 1-4")
            else:
                screen.add(row, f"missing_{name}", f"no {name} item chosen")
    if picks["best"] is not None and picks["best"] == picks["worst"]:
        found.append("same_best_worst")
        screen.add(row, "same_best_worst", f"item {picks['best'] + 1} chosen as both best and worst")
    if found:
        return None
    return Choice(screen.known[row.text("tuple_id")], worker, row.text("assignment_id"), picks["best"], picks["worst"])


def parse_position(value: str) -> int | None:
    """A position in the 4-tuple as the HIT sends it (1-4, `2.0` read as 2), as an index 0-3; None otherwise."""
    try:
        number = float(value)
    except ValueError:
        return None
    return int(number) - 1 if number.is_integer() and 1 <= number <= BWS_POSITIONS else None
