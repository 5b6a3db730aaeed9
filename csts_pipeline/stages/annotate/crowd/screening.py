"""What the crowd sends back: results files read and screened row by row, for the imports.

Each results file is read by the crowd platform whose file it is (crowd/platform.py: an MTurk batch-results CSV
or a plain CSV/JSONL by `mturk`, a Label Studio JSON export by `label_studio`) into the same `ResultRow`s. Every
row with a problem is left out and listed as a `Problem`, never dropped silently; the import steps write those
problems to `report.csv`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from itertools import repeat
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.records import file_fingerprint, fingerprint
from csts_pipeline.pipeline.schemas import REPORT_SCHEMA
from csts_pipeline.stages.annotate.crowd import columns
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
    item's condition writer nor by a `blocked` worker. The rows are checked as columns (crowd/columns.py), each
    check once over every row; the problems come out as the row-by-row screen (Screen.check) lists them: by file,
    then row, then check."""
    screen = Screen({t["item_id"]: i for i, t in enumerate(items)}, "item_id", tasks_file, qualified, blocked)
    parts, read_problems = [], []
    for path in results:
        part, problems = read_result_columns(path, RATING_FIELDS)
        parts.append(part)
        read_problems.append(problems)
    rows = columns.concat(parts)
    screen.rows_read += len(rows)
    text = {name: columns.texts(rows.column(name)) for name in ("item_id", "worker_id", "assignment_id")}
    found = _Found(rows, text["item_id"])
    item = _checked_rows(screen, rows, text, found)
    flag = columns.per_value(rows.column("not_pertinent"), parse_flag)
    rating = columns.per_value(rows.column("rating"), parse_rating)
    _check_answers(rows, text["worker_id"], flag, rating, found)
    ok = ~found.any()
    writer = columns.objects((t.get("writer_id") for t in items), len(items))
    own = ok & (item >= 0) & (text["worker_id"] == writer[np.maximum(item, 0)])
    found.add(own, "own_condition", lambda at: f"worker {text['worker_id'][at]} wrote this condition")
    ok &= ~own
    at = np.flatnonzero(ok)
    pair = columns.first_of(item[at] * (len(rows) + 1) + columns.codes_of(text["worker_id"][at]))
    again = np.zeros(len(rows), bool)
    again[at[pair != np.arange(len(at))]] = True
    first = np.zeros(len(rows), np.int64)
    first[at] = at[pair]
    where = "worker {w} already rated this item at {at}"
    found.add(again, "duplicate_rating", lambda r: where.format(w=text["worker_id"][r], at=rows.where(first[r])))
    screen.problems.extend(found.in_order(read_problems))
    at = np.flatnonzero(ok & ~again)
    kept = (item[at].tolist(), text["worker_id"][at].tolist(), text["assignment_id"][at].tolist())
    given = np.where(flag[at] == True, None, rating[at]).tolist()  # noqa: E712 (an object array of bools)
    flagged = (flag[at] == True).tolist()  # noqa: E712
    rows = zip(*kept, given, flagged, *[repeat(None)] * (len(Rating._fields) - 5))
    return screen, list(map(tuple.__new__, repeat(Rating), rows))  # tuples built directly: no call per row


def read_result_columns(path: Path, required: tuple[str, ...]) -> tuple[columns.ResultColumns, list[Problem]]:
    """A results file's rows as columns: straight from the CSV where its platform reads CSV so, else its rows."""
    if not path.is_file():
        raise UserError(f"{path}: results file not found")
    reader = reader_of(path)
    read = getattr(reader, "read_columns", None)
    if read is not None:
        found, problems, names = read(path, required)
    else:
        rows, problems, names = reader.read_results(path, required)
        found = columns.columns_of(path, rows)
    _checked(path, required, names, [], problems)
    return found, problems


class _Found:
    """The problems found over the rows as columns, one check at a time, and their report order."""

    def __init__(self, rows: columns.ResultColumns, ident: np.ndarray):
        self.rows, self.ident = rows, ident
        self.hit = np.zeros(len(rows), bool)
        self.found: list[tuple[np.ndarray, int, list[Problem]]] = []

    def add(self, mask: np.ndarray, problem: str | np.ndarray, detail: Callable[[int], str]) -> None:
        """The rows of `mask` have `problem` (one name, or one per row), the detail written by `detail(row)`."""
        at = np.flatnonzero(mask)
        self.hit[at] = True
        names = [problem] * len(at) if isinstance(problem, str) else problem[at].tolist()
        rows = self.rows
        made = [
            Problem(str(rows.files[rows.file[r]]), int(rows.row[r]), self.ident[r], name, detail(r))
            for r, name in zip(at.tolist(), names)
        ]
        self.found.append((at, len(self.found), made))

    def any(self) -> np.ndarray:
        return self.hit.copy()

    def in_order(self, read_problems: list[list[Problem]]) -> list[Problem]:
        """Each file's problems of reading, then its rows' problems by row and in the order of the checks."""
        at = np.concatenate([np.zeros(0, np.int64)] + [a for a, _, _ in self.found])
        check = np.concatenate([np.zeros(0, np.int64)] + [np.full(len(a), n) for a, n, _ in self.found])
        made = [p for _, _, problems in self.found for p in problems]
        order = np.lexsort((check, at))
        by_file = np.searchsorted(self.rows.file[at[order]], np.arange(len(read_problems) + 1))
        listed: list[Problem] = []
        for n, problems in enumerate(read_problems):
            listed += problems + [made[i] for i in order[by_file[n] : by_file[n + 1]].tolist()]
        return listed


def _checked_rows(
    screen: Screen, rows: columns.ResultColumns, text: dict[str, np.ndarray], found: _Found
) -> np.ndarray:
    """Screen.check over every row (rejected, not qualified, blocked, a posted id of another item, a missing or
    unknown id, an assignment seen before); returns each row's item index (-1 where it has none)."""
    worker, task, assignment = text["worker_id"], text["item_id"], text["assignment_id"]
    status = columns.per_value(rows.column("assignment_status"), lambda v: one_line(v).casefold() == "rejected")
    found.add(status.astype(bool), "rejected_assignment", lambda r: "the assignment was rejected on the crowd platform")
    if screen.qualified is not None:
        named = screen.qualified
        out = ~columns.per_value(worker, lambda w: w in named.workers).astype(bool)
        who = "(no worker id)"
        found.add(out, "not_qualified", lambda r: f"worker {worker[r] or who} is not qualified in {named.file}")
    stopped = columns.per_value(worker, lambda w: w in screen.blocked).astype(bool)
    found.add(stopped, "blocked", lambda r: f"worker {worker[r]} failed the hidden gold test (blocklist.csv)")
    posted = columns.texts(rows.column("item_id", posted=True))
    other = (posted != "") & (posted != task)  # a blank posted id (a page that posts none) leaves the HIT's
    found.add(other, "id_mismatch", lambda r: f"answer posted for item_id {posted[r]!r} in the HIT of {task[r]!r}")
    item = columns.per_value(task, lambda t: screen.known.get(t, -1)).astype(np.int64)
    missing = task == ""
    found.add(missing, "missing_id", lambda r: "no item_id")
    unknown = ~missing & (item < 0)
    found.add(unknown, "unknown_id", lambda r: f"item_id {task[r]!r} is not in {screen.tasks_file}")
    given = np.flatnonzero(assignment != "")
    first = np.arange(len(rows))
    first[given] = given[columns.first_of(columns.codes_of(assignment[given]))]
    seen = first != np.arange(len(rows))
    found.add(seen, "duplicate_assignment", lambda r: f"assignment {assignment[r]} also at {rows.where(first[r])}")
    return item


def _check_answers(
    rows: columns.ResultColumns, worker: np.ndarray, flag: np.ndarray, rating: np.ndarray, found: _Found
) -> None:
    """A missing worker, a flag that is not true/false, and no rating 1-5 on a row not flagged not pertinent."""
    found.add(worker == "", "missing_worker", lambda r: "no worker_id")
    flags = rows.column("not_pertinent")
    bad = np.array([f is None for f in flag.tolist()], bool)
    found.add(bad, "bad_flag", lambda r: f"not_pertinent {one_line(flags[r])!r} is not true/false")
    no_rating = np.array([r is None for r in rating.tolist()], bool) & (flag != True)  # noqa: E712
    given = columns.texts(rows.column("rating"))
    name = np.where(given != "", "bad_rating", "missing_rating")
    detail = "rating {!r} is not an integer from 1 to 5"
    found.add(no_rating, name, lambda r: detail.format(given[r]) if given[r] else "no rating")


# --------------------------------------------------------------------------------------------- best-worst results


def _worker(screen: Screen, row: ResultRow, found: list[str]) -> str:
    """The row's worker id; a missing one is recorded as the row's problem."""
    worker = row.text("worker_id")
    if not worker:
        found.append("missing_worker")
        screen.add(row, "missing_worker", "no worker_id")
    return worker


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
