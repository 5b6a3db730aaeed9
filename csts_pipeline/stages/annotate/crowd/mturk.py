"""Amazon Mechanical Turk as a crowd platform (crowd/platform.py): the HIT page `template.html` that MTurk fills
from each row of the batch input `hits.csv`; batch-results CSVs (`Input.x`, `Answer.x`, `WorkerId`, ...), and CSV
or JSONL files with the same fields unprefixed, read back as results rows; the qualification grant file that
"Manage > Workers > Upload CSV" takes, and the block list of workers who failed the hidden controls."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.schemas import BLOCK_SCHEMA
from csts_pipeline.stages.annotate.crowd import pages
from csts_pipeline.stages.annotate.crowd.columns import ColumnsRead, columns_of, csv_columns
from csts_pipeline.stages.annotate.crowd.files import write_csv
from csts_pipeline.stages.annotate.crowd.platform import Read
from csts_pipeline.stages.annotate.crowd.results import Problem, ResultRow
from csts_pipeline.stages.annotate.layout import HITS

GRANT = "mturk_workers.csv"  # qualification/: Worker ID, UPDATE-<qualification name>
BLOCKLIST = "blocklist.csv"  # ratings/: WorkerId, Reason (MTurk's CreateWorkerBlock fields)
SUFFIXES = (".csv", ".jsonl")
FIELDS = {
    "WorkerId": "worker_id",
    "AssignmentId": "assignment_id",
    "AssignmentStatus": "assignment_status",
    "HITId": "hit_id",
}


class MTurk:
    name = "mturk"
    results = "a batch-results CSV, or CSV/JSONL with plain field names (.csv, .jsonl)"

    def supports(self, stage: str) -> bool:
        return stage in pages.STAGES

    def write_tasks(self, folder: Path, stage: str, hits: pa.Table, repeats: dict[str, int] | None) -> dict[str, str]:
        """The stage's HIT page, whose placeholders are exactly the columns of `hits.csv`."""
        return {"page": pages.write_page(folder, stage, hits.column_names, repeats)}

    def where(self, folder: Path, stage: str) -> str:
        return f"  MTurk: {folder / HITS} (batch input), {folder / pages.PAGE} (the HIT page)"

    def reads(self, path: Path) -> bool:
        return path.suffix.lower() in SUFFIXES

    def read_results(self, path: Path, required: tuple[str, ...]) -> Read:
        """One row per CSV line after the header or per JSON object line."""
        try:
            with path.open(encoding="utf-8-sig", newline="") as handle:
                return _jsonl_rows(path, handle) if path.suffix.lower() == ".jsonl" else _csv_rows(path, handle)
        except (UnicodeDecodeError, csv.Error) as exc:
            raise UserError(f"{path}: not a readable results file ({exc})") from None

    def read_columns(self, path: Path, required: tuple[str, ...]) -> ColumnsRead:
        """The rows as read_results reads them, as columns: a CSV read straight into them (crowd/columns.py)."""
        if path.suffix.lower() == ".jsonl":
            rows, problems, names = self.read_results(path, required)
            return columns_of(path, rows), problems, names
        try:
            with path.open(encoding="utf-8-sig", newline="") as handle:
                return csv_columns(path, handle, column_plan)
        except (UnicodeDecodeError, csv.Error) as exc:
            raise UserError(f"{path}: not a readable results file ({exc})") from None

    def grant(self, folder: Path, workers: list[tuple[str, bool]], name: str) -> dict[str, str]:
        """The grant file: each tested worker with 1 (qualified) or 0 under the qualification's UPDATE- column."""
        table = {"Worker ID": [w for w, _ in workers], f"UPDATE-{name}": [int(passed) for _, passed in workers]}
        write_csv(pa.table(table), folder / GRANT)
        return {"grant": GRANT}

    def block(self, folder: Path, blocked: list[tuple[str, str]]) -> dict[str, str]:
        rows = [{"WorkerId": worker, "Reason": reason} for worker, reason in blocked]
        write_csv(pa.Table.from_pylist(rows, schema=BLOCK_SCHEMA), folder / BLOCKLIST)
        return {"blocklist": BLOCKLIST}


PLATFORM = MTurk()


def _jsonl_rows(path: Path, lines: Iterable[str]) -> Read:
    """One row per JSON object line; a line that is not one is a `bad_json` problem, not an error."""
    rows: list[ResultRow] = []
    problems: list[Problem] = []
    columns: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            problems.append(Problem(str(path), number, "", "bad_json", "not a JSON object"))
            continue
        fields, posted = row_fields(value.items())
        columns.update(fields)
        rows.append(ResultRow(path, number, fields, posted))
    return rows, problems, columns


def _csv_rows(path: Path, lines: Iterable[str]) -> Read:
    """One row per non-blank line after the header; row numbers count the header as row 1, as spreadsheets do."""
    reader = csv.reader(lines, strict=True)  # strict: an unterminated quote is an error, not one long field
    try:
        header = next(reader, [])
        rows = [
            ResultRow(path, index + 2, *row_fields(zip(header, values)))
            for index, values in enumerate(reader)
            if any(value.strip() for value in values)
        ]
    except csv.Error as exc:
        raise UserError(f"{path}: line {reader.line_num}: not valid CSV ({exc}); nothing imported") from None
    return rows, [], {field_name(name) for name in header}


def field_name(column: str) -> str:
    """MTurk batch-results names to plain ones: Input.x and Answer.x to x, WorkerId to worker_id, ..."""
    column = column.strip()
    if column in FIELDS:
        return FIELDS[column]
    for prefix in ("Input.", "Answer."):
        if column.startswith(prefix):
            return column[len(prefix) :]
    return column


def column_plan(header: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """row_fields of the header's column indices: where each field and each posted answer is, for every row."""
    return row_fields(zip(header, range(len(header))))


def row_fields(columns: Iterable[tuple[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A row's fields by plain name, and the answers posted under a name the HIT's input also has: `Input.x` is
    what the HIT showed, so it is the field; `Answer.x` is kept apart for the screen to compare
    (`item_id` posted for another item than the HIT's is a mismatch, not a rating of that other item)."""
    fields: dict[str, Any] = {}
    posted: dict[str, Any] = {}
    given: dict[str, str] = {}
    for column, value in columns:
        name, prefix = field_name(column), column.strip().split(".", 1)[0]
        if name in given and {given[name], prefix} == {"Input", "Answer"}:
            if prefix == "Answer":
                posted[name] = value
                continue
            posted[name] = fields[name]
        fields[name], given[name] = value, prefix
    return fields, posted
