"""annotate: the human round trip that turns filtered caption pairs into a C-STS dataset (paper Section 2.2.2).

export conditions -> crowd writes a high- and a low-similarity condition per pair -> import conditions ->
export ratings -> crowd rates each (s1, s2, c) on 1-5 and may flag the condition not pertinent -> import ratings
(aggregate, drop flagged items, agreement) -> split (train/validation/test in the C-STS format `train` reads).

Each step owns one folder under the annotate folder (`<work_dir>/annotate/` by default) with a stage record, so
a rerun with the same inputs is a no-op. Task ids derive from pair ids, so a re-export gives the same ids. File
formats and the answer fields a results file must carry: docs/annotate.md.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from scipy.stats import spearmanr

from pipeline.errors import UserError
from pipeline.records import StageRun, file_fingerprint, fingerprint, read_record, require_record, write_json
from pipeline.shards import list_shards, read_table, write_table

log = logging.getLogger(__name__)

CONDITIONS_TASKS = "conditions_tasks"
CONDITIONS = "conditions"
RATINGS_TASKS = "ratings_tasks"
RATINGS = "ratings"
CSTS = "csts"
HITS = "hits.csv"
TASKS = "tasks.jsonl"
REPORT = "report.csv"

PROVENANCE = ("pair_id", "image_id_1", "image_id_2", "caption_id_1", "caption_id_2")
KEPT_COLUMNS = (*PROVENANCE, "sentence1", "sentence2", "image_cosine", "iou")
CONDITION_TYPES = ("high", "low")
RATING_SCALE = (1, 5)
SPLITS = ("train", "validation", "test")
_MASK64 = (1 << 64) - 1
_MTURK_FIELDS = {
    "WorkerId": "worker_id",
    "AssignmentId": "assignment_id",
    "AssignmentStatus": "assignment_status",
    "HITId": "hit_id",
}
REPORT_SCHEMA = pa.schema(
    [("file", pa.string()), ("row", pa.int64()), ("id", pa.string()), ("problem", pa.string()), ("detail", pa.string())]
)
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}

CSTS_SCHEMA = pa.schema(
    [
        ("sentence1", pa.string()),
        ("sentence2", pa.string()),
        ("condition", pa.string()),
        ("label", pa.float64()),
        *((name, pa.int64()) for name in PROVENANCE),
        ("condition_type", pa.string()),
        ("split", pa.string()),
    ]
)


# ---------------------------------------------------------------------------------------------------- ids and I/O


def condition_task_id(pair_id: int) -> str:
    """`c-` and the pair id as 16 hex digits (caption_id_1's 8, then caption_id_2's)."""
    return f"c-{pair_id & _MASK64:016x}"


def rating_item_id(pair_id: int, condition_type: str) -> str:
    return f"r-{pair_id & _MASK64:016x}-{condition_type}"


def write_csv(table: pa.Table, path: Path) -> None:
    """Atomic CSV write (temporary name, then rename); strings quoted only where needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pacsv.write_csv(table, tmp, pacsv.WriteOptions(quoting_style="needed"))
    os.replace(tmp, path)


def write_jsonl(records: list[dict[str, Any]], path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """One of this stage's own task files."""
    if not path.is_file():
        raise UserError(f"{path}: not found (run the export step that writes it first)")
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _text(value: Any) -> str:
    """A results field as one line of text: missing is empty, inner whitespace runs become one space."""
    return "" if value is None else " ".join(str(value).split())


def _same_text(a: str, b: str) -> bool:
    return a.casefold() == b.casefold()


# ------------------------------------------------------------------------------------------------ kept pairs input


@dataclass
class KeptSource:
    """The filter stage's kept pairs: shards or one Parquet/CSV file, identified by `fingerprint`."""

    files: list[Path]
    fingerprint: str

    @property
    def name(self) -> Path:
        """What error messages call the input: the file, or the folder of the shards."""
        return self.files[0] if len(self.files) == 1 else self.files[0].parent

    def read(self, columns: tuple[str, ...]) -> tuple[pa.Table, np.ndarray]:
        """All files' `columns` concatenated, and each file's first row in the concatenation."""
        tables = [_read_kept_file(path, columns) for path in self.files]
        offsets = np.cumsum([0] + [t.num_rows for t in tables])
        return pa.concat_tables(tables), offsets

    def take(self, offsets: np.ndarray, rows: np.ndarray) -> pa.Table:
        """The full kept columns of `rows` (indices into the concatenation), in the order given."""
        order = np.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        owner = np.searchsorted(offsets, sorted_rows, side="right") - 1
        parts = [
            _read_kept_file(self.files[f], KEPT_COLUMNS).take(pa.array(sorted_rows[owner == f] - offsets[f]))
            for f in np.unique(owner)
        ]
        return pa.concat_tables(parts).take(pa.array(np.argsort(order)))


def kept_source(work_dir: Path | None, input_path: Path | None) -> KeptSource:
    """`--input` (a kept folder, a Parquet or a CSV file), else `<work_dir>/filter/kept/` of a finished filter."""
    if input_path is None:
        if work_dir is None:
            raise UserError("give --dataset/--manifest (to read <work_dir>/filter/kept/) or --input PATH")
        record = require_record(work_dir / "filter", "filter")
        files = list_shards(work_dir / "filter" / "kept")
        if not files:
            raise UserError(f"{work_dir / 'filter' / 'kept'}: no kept shards (the filter kept no pairs?)")
        return KeptSource(files, record["fingerprint"])
    if input_path.is_dir():
        files = list_shards(input_path)
        if not files:
            raise UserError(f"{input_path}: no part-*.parquet shards in this folder")
    elif input_path.is_file() and input_path.suffix in (".parquet", ".csv"):
        files = [input_path]
    else:
        raise UserError(f"{input_path}: expected a folder of kept shards, a .parquet or a .csv file")
    return KeptSource(files, fingerprint([(p.name, file_fingerprint(p)) for p in files]))


def _read_kept_file(path: Path, columns: tuple[str, ...]) -> pa.Table:
    if path.suffix == ".csv":
        types = {name: pa.string() for name in ("sentence1", "sentence2")}
        types |= {name: pa.int64() for name in PROVENANCE} | {"image_cosine": pa.float64(), "iou": pa.float64()}
        try:
            table = pacsv.read_csv(
                path,
                parse_options=pacsv.ParseOptions(newlines_in_values=True),
                convert_options=pacsv.ConvertOptions(column_types=types, strings_can_be_null=False),
            )
        except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
            raise UserError(f"{path}: not a readable kept-pairs CSV ({str(exc).splitlines()[0]})") from None
        present = table.column_names
    else:
        try:
            present = pq.read_schema(path).names
        except (pa.ArrowInvalid, OSError) as exc:
            raise UserError(f"{path}: not a readable Parquet file ({exc})") from None
        table = None
    missing = [name for name in columns if name not in present]
    if missing:
        raise UserError(f"{path}: missing column(s) {', '.join(missing)} (filter's kept schema, docs/schemas.md)")
    return table.select(list(columns)) if table is not None else read_table(path, list(columns))


# ------------------------------------------------------------------------------------------- stratified sampling


def hash64(values: np.ndarray, seed: int) -> np.ndarray:
    """splitmix64 of each value mixed with the seed: a seeded random key that depends on the value, not on the
    row's position, so the same pairs are drawn however the input is sharded or ordered."""
    with np.errstate(over="ignore"):
        z = values.astype(np.int64).view(np.uint64) + np.uint64((seed * 0x9E3779B97F4A7C15 + 1) & _MASK64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def quantile_bins(values: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Bin index per value over `bins` quantile bins, and the inner edges. A value equal to an edge falls in the
    lower bin, so tied values share a bin and a heavy tie (many pairs with iou 0) gets a bin of its own while the
    other values still spread over the bins above it (some bins stay empty instead)."""
    edges = np.quantile(values, np.linspace(0, 1, bins + 1)[1:-1])
    return np.searchsorted(edges, values, side="left"), edges


def allocate(sizes: np.ndarray, n: int) -> np.ndarray:
    """Split n across strata as evenly as their sizes allow: small strata are taken whole, what they cannot use
    goes to the others (water filling, smallest first; leftover units go to the larger strata)."""
    quota = np.zeros(len(sizes), np.int64)
    open_strata = [s for s in np.argsort(sizes, kind="stable") if sizes[s] > 0]
    remaining = min(n, int(sizes.sum()))
    for position, stratum in enumerate(open_strata):
        quota[stratum] = min(int(sizes[stratum]), remaining // (len(open_strata) - position))
        remaining -= quota[stratum]
    return quota


@dataclass
class Sample:
    rows: np.ndarray  # sampled row indices, in the seeded random task order
    strata: np.ndarray  # stratum of every input row: cosine_bin * bins + iou_bin
    sizes: np.ndarray  # rows per stratum
    quota: np.ndarray  # sampled rows per stratum
    cosine_edges: np.ndarray
    iou_edges: np.ndarray


def stratified_sample(pair_ids: np.ndarray, cosine: np.ndarray, iou: np.ndarray, n: int, seed: int, bins: int):
    """A seeded sample of n rows stratified over quantile bins of image cosine x iou, allocated evenly across the
    non-empty strata; within a stratum the rows with the smallest seeded keys are taken."""
    cosine_bin, cosine_edges = quantile_bins(cosine, bins)
    iou_bin, iou_edges = quantile_bins(iou, bins)
    strata = cosine_bin * bins + iou_bin
    sizes = np.bincount(strata, minlength=bins * bins)
    quota = allocate(sizes, n)
    key = hash64(pair_ids, seed)
    by_stratum = np.argsort(strata, kind="stable")
    chosen = []
    for rows, take in zip(np.split(by_stratum, np.cumsum(sizes)[:-1]), quota):
        if 0 < take < len(rows):
            rows = rows[np.argpartition(key[rows], take - 1)[:take]]
        chosen.append(rows[:take])
    chosen = np.concatenate(chosen)
    return Sample(chosen[np.argsort(key[chosen], kind="stable")], strata, sizes, quota, cosine_edges, iou_edges)


def _unique_pairs(table: pa.Table) -> np.ndarray:
    """Rows to sample from: the first row of each pair id, and one of (a, b) / (b, a) when both were kept."""
    caption_1 = table.column("caption_id_1").to_numpy()
    caption_2 = table.column("caption_id_2").to_numpy()
    unordered = (np.minimum(caption_1, caption_2).astype(np.int64) << 32) | np.maximum(caption_1, caption_2)
    _, first = np.unique(unordered, return_index=True)
    return np.sort(first)


# ----------------------------------------------------------------------------------------------- results files


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
    file: Path
    row: int
    fields: dict[str, Any]

    def text(self, name: str) -> str:
        return _text(self.fields.get(name))

    def where(self) -> str:
        return f"{self.file.name}:{self.row}"


def _field_name(column: str) -> str:
    """MTurk batch-results names to plain ones: Input.x and Answer.x to x, WorkerId to worker_id, ..."""
    column = column.strip()
    if column in _MTURK_FIELDS:
        return _MTURK_FIELDS[column]
    for prefix in ("Input.", "Answer."):
        if column.startswith(prefix):
            return column[len(prefix) :]
    return column


def read_results(path: Path, required: tuple[str, ...]) -> tuple[list[ResultRow], list[Problem]]:
    """The rows of an MTurk batch-results CSV, or of a plain CSV/JSONL with the same fields unprefixed; lines that
    are not JSON objects come back as problems. A file without the `required` fields is a UserError."""
    if not path.is_file():
        raise UserError(f"{path}: results file not found")
    rows: list[ResultRow] = []
    problems: list[Problem] = []
    columns: set[str] = set()
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            if path.suffix == ".jsonl":
                for number, line in enumerate(handle, start=1):
                    if not line.strip():
                        continue
                    try:
                        value = json.loads(line)
                    except json.JSONDecodeError:
                        value = None
                    if not isinstance(value, dict):
                        problems.append(Problem(str(path), number, "", "bad_json", "not a JSON object"))
                        continue
                    fields = {_field_name(k): v for k, v in value.items()}
                    columns.update(fields)
                    rows.append(ResultRow(path, number, fields))
            else:
                reader = csv.reader(handle)
                names = [_field_name(name) for name in next(reader, [])]
                columns.update(names)
                for index, values in enumerate(reader):
                    if any(value.strip() for value in values):
                        rows.append(ResultRow(path, index + 2, dict(zip(names, values))))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise UserError(f"{path}: not a readable results file ({exc})") from None
    missing = [name for name in required if name not in columns]
    if missing:
        found = ", ".join(sorted(columns)[:8]) or "none"
        raise UserError(
            f"{path}: missing field(s) {', '.join(missing)} (as Input./Answer. columns of an MTurk batch-results "
            f"CSV or plain names; found: {found}); see docs/annotate.md"
        )
    return rows, problems


class _Screen:
    """Per-row checks shared by both imports: rejected assignments, missing/unknown ids, duplicate assignments."""

    def __init__(self, known: dict[str, int], id_field: str, tasks_file: Path) -> None:
        self.known = known
        self.id_field = id_field
        self.tasks_file = tasks_file
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
        task = row.text(self.id_field)
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

    def report(self, path: Path) -> None:
        table = pa.Table.from_pylist([vars(p) for p in self.problems], schema=REPORT_SCHEMA)
        write_csv(table, path)

    def summary(self) -> dict[str, int]:
        return dict(Counter(p.problem for p in self.problems).most_common())

    def excluded_rows(self) -> int:
        return len({(p.file, p.row) for p in self.problems})


def _results_fingerprint(results: list[Path]) -> str:
    """The results files' contents in order (order matters: the first valid answer of a task wins)."""
    for path in results:
        if not path.is_file():
            raise UserError(f"{path}: results file not found")
    return fingerprint([file_fingerprint(path) for path in results])


def _up_to_date(stage: StageRun) -> dict[str, Any]:
    return {"status": "up-to-date", "stage": stage.stage, "folder": str(stage.folder)}


def _guard_tasks(stage: StageRun, force: bool) -> None:
    """Task files may already be out with workers: replacing them with different tasks needs --force."""
    record = read_record(stage.folder)
    if record is not None and record.get("fingerprint") != stage.fingerprint and not force:
        raise UserError(
            f"{stage.folder}: tasks were already exported from other inputs or parameters ({record.get('params')}); "
            "answers collected for them may not match new ones; --force replaces them"
        )


# ---------------------------------------------------------------------------------------- step 1: export conditions


def export_conditions(annotate_dir: Path, source: KeptSource, n: int, seed: int, bins: int, force: bool) -> dict:
    """Sample n kept pairs (seeded, stratified over image cosine x iou) and write the condition-writing tasks:
    `hits.csv` (MTurk batch input, one HIT per pair) and `tasks.jsonl` (ids, provenance, strata)."""
    if n <= 0:
        raise UserError(f"--n must be positive (got {n})")
    if bins <= 0:
        raise UserError(f"--bins must be positive (got {bins})")
    stage = StageRun(
        "annotate-export-conditions",
        annotate_dir / CONDITIONS_TASKS,
        {"n": n, "seed": seed, "bins": bins},
        {"kept": source.fingerprint},
    )
    if stage.is_done() and not force:
        return _up_to_date(stage)
    _guard_tasks(stage, force)

    numeric, offsets = source.read(("pair_id", "caption_id_1", "caption_id_2", "image_cosine", "iou"))
    for name in numeric.column_names:
        if numeric.column(name).null_count:
            raise UserError(f"{source.name}: {numeric.column(name).null_count} kept row(s) without {name}")
    candidates = _unique_pairs(numeric)
    if len(candidates) == 0:
        raise UserError(f"{source.name}: no kept pairs to sample from")
    cosine = numeric.column("image_cosine").to_numpy()[candidates].astype(np.float64)
    iou = numeric.column("iou").to_numpy()[candidates].astype(np.float64)
    pair_ids = numeric.column("pair_id").to_numpy()[candidates]
    sample = stratified_sample(pair_ids, cosine, iou, n, seed, bins)
    picked = source.take(offsets, candidates[sample.rows])

    stage.begin(force=True)
    records = []
    for row, stratum in zip(picked.to_pylist(), sample.strata[sample.rows]):
        records.append(
            {
                "task_id": condition_task_id(row["pair_id"]),
                **{name: row[name] for name in (*PROVENANCE, "sentence1", "sentence2")},
                "image_cosine": round(float(row["image_cosine"]), 6),
                "iou": round(float(row["iou"]), 6),
                "cosine_bin": int(stratum // bins),
                "iou_bin": int(stratum % bins),
            }
        )
    hits = pa.table({name: [r[name] for r in records] for name in ("task_id", "sentence1", "sentence2")})
    write_csv(hits, stage.folder / HITS)
    write_jsonl(records, stage.folder / TASKS)
    strata = {
        f"cosine_bin={s // bins},iou_bin={s % bins}": {
            "available": int(sample.sizes[s]),
            "sampled": int(sample.quota[s]),
        }
        for s in np.flatnonzero(sample.sizes)
    }
    counts = {
        "kept_rows": numeric.num_rows,
        "unique_pairs": len(candidates),
        "tasks": len(records),
        "strata": len(strata),
    }
    return stage.finish(
        counts,
        strata=strata,
        cosine_edges=[round(float(e), 6) for e in sample.cosine_edges],
        iou_edges=[round(float(e), 6) for e in sample.iou_edges],
        files={"hits": str(stage.folder / HITS), "tasks": str(stage.folder / TASKS)},
    )


# ---------------------------------------------------------------------------------------- step 2: import conditions


CONDITION_FIELDS = ("task_id", "condition_high", "condition_low")


def import_conditions(annotate_dir: Path, results: list[Path], force: bool) -> dict:
    """Validate condition-writing results against the exported tasks; write one (s1, s2, c) triplet per accepted
    condition (`conditions.parquet`, high then low for each pair) and the per-row problems (`report.csv`)."""
    tasks_dir = annotate_dir / CONDITIONS_TASKS
    upstream = require_record(tasks_dir, "annotate export --stage conditions")
    stage = StageRun(
        "annotate-import-conditions",
        annotate_dir / CONDITIONS,
        {},
        {"tasks": upstream["fingerprint"], "results": _results_fingerprint(results)},
    )
    if stage.is_done() and not force:
        return _up_to_date(stage)
    tasks = read_jsonl(tasks_dir / TASKS)
    screen = _Screen({t["task_id"]: i for i, t in enumerate(tasks)}, "task_id", tasks_dir / TASKS)
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
            if high and low and _same_text(high, low):
                screen.add(row, "same_conditions", "condition_high and condition_low are the same text")
            if found or not high or not low or _same_text(high, low):
                continue
            task = screen.known[row.text("task_id")]
            if task in answers:
                screen.add(row, "duplicate_task", f"task already answered at {answers[task].where()}")
                continue
            answers[task] = row

    stage.begin(force=True)
    screen.report(stage.folder / REPORT)
    if not answers:
        raise UserError(
            f"{results[0]}: no valid condition answers ({_problem_line(screen)}); see {stage.folder / REPORT}"
        )
    triplets = []
    for task_index in sorted(answers):
        task, row = tasks[task_index], answers[task_index]
        for kind in CONDITION_TYPES:
            triplets.append(
                {
                    "item_id": rating_item_id(task["pair_id"], kind),
                    "task_id": task["task_id"],
                    **{name: task[name] for name in (*PROVENANCE, "sentence1", "sentence2")},
                    "condition": row.text(f"condition_{kind}"),
                    "condition_type": kind,
                    "worker_id": row.text("worker_id") or None,
                    "assignment_id": row.text("assignment_id") or None,
                }
            )
    write_table(pa.Table.from_pylist(triplets, schema=TRIPLET_SCHEMA), stage.folder / "conditions.parquet")
    counts = {
        "tasks": len(tasks),
        "rows_read": screen.rows_read,
        "accepted": len(answers),
        "excluded_rows": screen.excluded_rows(),
        "unanswered_tasks": len(tasks) - len(answers),
        "triplets": len(triplets),
    }
    files = {"conditions": str(stage.folder / "conditions.parquet"), "report": str(stage.folder / REPORT)}
    return stage.finish(counts, problems=screen.summary(), files=files)


TRIPLET_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        ("task_id", pa.string()),
        *((name, pa.int64()) for name in PROVENANCE),
        ("sentence1", pa.string()),
        ("sentence2", pa.string()),
        ("condition", pa.string()),
        ("condition_type", pa.string()),
        ("worker_id", pa.string()),
        ("assignment_id", pa.string()),
    ]
)


def _problem_line(screen: _Screen) -> str:
    return ", ".join(f"{name} {count}" for name, count in screen.summary().items()) or "no rows"


# ------------------------------------------------------------------------------------------- step 3: export ratings


def export_ratings(annotate_dir: Path, seed: int, force: bool) -> dict:
    """One rating task per (s1, s2, c), in a seeded order that separates a pair's two conditions; the HIT CSV
    hides which condition was meant to be high or low."""
    conditions_dir = annotate_dir / CONDITIONS
    upstream = require_record(conditions_dir, "annotate import --stage conditions")
    stage = StageRun(
        "annotate-export-ratings", annotate_dir / RATINGS_TASKS, {"seed": seed}, {"conditions": upstream["fingerprint"]}
    )
    if stage.is_done() and not force:
        return _up_to_date(stage)
    _guard_tasks(stage, force)
    triplets = read_table(conditions_dir / "conditions.parquet")
    is_low = triplets.column("condition_type").to_numpy(zero_copy_only=False) == "low"
    key = hash64(triplets.column("pair_id").to_numpy() * 2 + is_low, seed)
    triplets = triplets.take(pa.array(np.argsort(key, kind="stable")))

    stage.begin(force=True)
    records = [
        {
            "item_id": row["item_id"],
            **{name: row[name] for name in (*PROVENANCE, "sentence1", "sentence2", "condition", "condition_type")},
            "writer_id": row["worker_id"],
        }
        for row in triplets.to_pylist()
    ]
    write_csv(triplets.select(["item_id", "sentence1", "sentence2", "condition"]), stage.folder / HITS)
    write_jsonl(records, stage.folder / TASKS)
    counts = {"items": len(records), "pairs": len({r["pair_id"] for r in records})}
    return stage.finish(counts, files={"hits": str(stage.folder / HITS), "tasks": str(stage.folder / TASKS)})


# ------------------------------------------------------------------------------------------- step 4: import ratings


RATING_FIELDS = ("item_id", "worker_id", "rating")


class FleissKappa(NamedTuple):
    kappa: float
    observed: float  # mean per-item agreement, P-bar
    expected: float  # chance agreement, P_e


def fleiss_kappa(counts: np.ndarray) -> FleissKappa:
    """Fleiss' kappa from counts[item, category] (raters who chose the category). Items may have different
    numbers of raters (each >= 2): per-item agreement uses the item's own count, category shares pool all
    ratings; with a constant count this is Fleiss (1971) exactly."""
    counts = np.asarray(counts, dtype=np.float64)
    raters = counts.sum(axis=1)
    if counts.shape[0] == 0 or (raters < 2).any():
        raise ValueError("Fleiss' kappa needs at least one item and at least 2 ratings per item")
    observed = float((((counts**2).sum(axis=1) - raters) / (raters * (raters - 1))).mean())
    shares = counts.sum(axis=0) / raters.sum()
    expected = float((shares**2).sum())
    kappa = (observed - expected) / (1 - expected) if expected < 1 else float("nan")
    return FleissKappa(kappa, observed, expected)


def aggregate(item: np.ndarray, rating: np.ndarray, n_items: int, how: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-item label (mean or median of its ratings; nan without any) and number of ratings."""
    count = np.bincount(item, minlength=n_items)
    label = np.full(n_items, np.nan)
    has = count > 0
    if how == "mean":
        label[has] = np.bincount(item, weights=rating, minlength=n_items)[has] / count[has]
    elif how == "median":
        ordered = rating[np.lexsort((rating, item))]
        starts = np.cumsum(count) - count
        label[has] = (ordered[(starts + (count - 1) // 2)[has]] + ordered[(starts + count // 2)[has]]) / 2
    else:
        raise UserError(f"--aggregate must be mean or median (got {how!r})")
    return label, count


def worker_agreement(item: np.ndarray, worker: np.ndarray, rating: np.ndarray) -> list[dict[str, Any]]:
    """Each worker against the others on the items they share: Spearman's rho of the worker's ratings with the
    mean of the other raters' ratings on the same items, mean |difference|, and the share within 1 point. Only
    items with two or more ratings count."""
    count = np.bincount(item)
    total = np.bincount(item, weights=rating)
    shared = count[item] >= 2
    item, worker, rating = item[shared], worker[shared], rating[shared]
    others = (total[item] - rating) / (count[item] - 1)
    names, codes = np.unique(worker, return_inverse=True)
    order = np.argsort(codes, kind="stable")
    bounds = np.cumsum(np.bincount(codes, minlength=len(names)))[:-1]
    rows = []
    for name, own, rest in zip(names, np.split(rating[order], bounds), np.split(others[order], bounds)):
        varies = len(own) >= 3 and np.ptp(own) > 0 and np.ptp(rest) > 0
        rho = float(spearmanr(own, rest).statistic) if varies else None
        difference = np.abs(own - rest)
        rows.append(
            {
                "worker_id": str(name),
                "items": len(own),
                "spearman": None if rho is None else round(rho, 4),
                "mean_abs_diff": round(float(difference.mean()), 4),
                "within_1": round(float((difference <= 1).mean()), 4),
            }
        )
    return sorted(rows, key=lambda r: (r["spearman"] is not None, r["spearman"] or 0.0, -r["items"]))


def _flag(value: Any) -> bool | None:
    """A checkbox-like answer: true/false, 1/0, yes/no, on/off or empty (unchecked); None when unreadable."""
    if isinstance(value, bool):
        return value
    text = _text(value).casefold()
    return True if text in _TRUE else False if text in _FALSE else None


def _rating(value: Any) -> int | None:
    text = _text(value)
    try:
        number = float(text)
    except ValueError:
        return None
    low, high = RATING_SCALE
    return int(number) if number.is_integer() and low <= number <= high else None


ITEM_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        *((name, pa.int64()) for name in PROVENANCE),
        ("sentence1", pa.string()),
        ("sentence2", pa.string()),
        ("condition", pa.string()),
        ("condition_type", pa.string()),
        ("label", pa.float64()),
        ("ratings", pa.int64()),
        ("not_pertinent", pa.int64()),
        ("answers", pa.int64()),
        ("status", pa.string()),
    ]
)
RATING_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        ("worker_id", pa.string()),
        ("assignment_id", pa.string()),
        ("rating", pa.int8()),
        ("not_pertinent", pa.bool_()),
    ]
)


def import_ratings(
    annotate_dir: Path,
    results: list[Path],
    how: str = "mean",
    not_pertinent_share: float = 0.5,
    min_ratings: int = 1,
    force: bool = False,
) -> dict:
    """Validate rating results; aggregate each item's ratings (`how`: mean or median); drop items that more than
    `not_pertinent_share` of their raters flag as not pertinent, or that have fewer than `min_ratings` ratings;
    report Fleiss' kappa and per-worker agreement over the kept items with two or more ratings."""
    if how not in ("mean", "median"):
        raise UserError(f"--aggregate must be mean or median (got {how!r})")
    if not 0 <= not_pertinent_share < 1:
        raise UserError(f"--not-pertinent-share must be in [0, 1) (got {not_pertinent_share})")
    if min_ratings < 1:
        raise UserError(f"--min-ratings must be at least 1 (got {min_ratings})")
    tasks_dir = annotate_dir / RATINGS_TASKS
    upstream = require_record(tasks_dir, "annotate export --stage ratings")
    params = {"aggregate": how, "not_pertinent_share": not_pertinent_share, "min_ratings": min_ratings}
    inputs = {"tasks": upstream["fingerprint"], "results": _results_fingerprint(results)}
    stage = StageRun("annotate-import-ratings", annotate_dir / RATINGS, params, inputs)
    if stage.is_done() and not force:
        return _up_to_date(stage)
    items = read_jsonl(tasks_dir / TASKS)
    screen = _Screen({t["item_id"]: i for i, t in enumerate(items)}, "item_id", tasks_dir / TASKS)
    accepted: list[tuple[int, str, str, int | None, bool]] = []
    seen: dict[tuple[int, str], str] = {}
    for path in results:
        rows, problems = read_results(path, RATING_FIELDS)
        screen.problems.extend(problems)
        for row in rows:
            found = screen.check(row)
            worker = row.text("worker_id")
            if not worker:
                found.append("missing_worker")
                screen.add(row, "missing_worker", "no worker_id")
            flag = _flag(row.fields.get("not_pertinent"))
            if flag is None:
                found.append("bad_flag")
                screen.add(row, "bad_flag", f"not_pertinent {row.text('not_pertinent')!r} is not true/false")
            rating = _rating(row.fields.get("rating"))
            if not flag and rating is None:
                found.append("bad_rating")
                given = row.text("rating")
                detail = f"rating {given!r} is not an integer from 1 to 5" if given else "no rating"
                screen.add(row, "bad_rating" if given else "missing_rating", detail)
            if found:
                continue
            index = screen.known[row.text("item_id")]
            if worker == items[index].get("writer_id"):
                screen.add(row, "own_condition", f"worker {worker} wrote this condition")
                continue
            if (index, worker) in seen:
                screen.add(row, "duplicate_rating", f"worker {worker} already rated this item at {seen[index, worker]}")
                continue
            seen[index, worker] = row.where()
            accepted.append((index, worker, row.text("assignment_id"), None if flag else rating, bool(flag)))

    stage.begin(force=True)
    screen.report(stage.folder / REPORT)
    if not accepted:
        raise UserError(f"{results[0]}: no valid ratings ({_problem_line(screen)}); see {stage.folder / REPORT}")
    item = np.array([a[0] for a in accepted], np.int64)
    flagged = np.array([a[4] for a in accepted], bool)
    rated = ~flagged
    rating = np.array([a[3] if a[3] is not None else 0 for a in accepted], np.float64)
    label, n_ratings = aggregate(item[rated], rating[rated], len(items), how)
    answers = np.bincount(item, minlength=len(items))
    flags = np.bincount(item, weights=flagged, minlength=len(items)).astype(np.int64)
    status = np.full(len(items), "kept", dtype=object)
    status[n_ratings < min_ratings] = "too_few_ratings"
    with np.errstate(invalid="ignore", divide="ignore"):
        status[flags / answers > not_pertinent_share] = "not_pertinent"
    status[answers == 0] = "unanswered"

    item_rows = [
        {
            **{name: task[name] for name in ("item_id", *PROVENANCE, "sentence1", "sentence2", "condition")},
            "condition_type": task["condition_type"],
            "label": None if np.isnan(label[i]) else float(label[i]),
            "ratings": int(n_ratings[i]),
            "not_pertinent": int(flags[i]),
            "answers": int(answers[i]),
            "status": status[i],
        }
        for i, task in enumerate(items)
    ]
    write_table(pa.Table.from_pylist(item_rows, schema=ITEM_SCHEMA), stage.folder / "items.parquet")
    individual = [
        {"item_id": items[a[0]]["item_id"], "worker_id": a[1], "assignment_id": a[2] or None}
        | {"rating": a[3], "not_pertinent": a[4]}
        for a in accepted
    ]
    write_table(pa.Table.from_pylist(individual, schema=RATING_SCHEMA), stage.folder / "ratings.parquet")

    agreement = _agreement(item[rated], np.array([a[1] for a in accepted])[rated], rating[rated], status)
    write_json(stage.folder / "agreement.json", agreement)
    counts = {
        "items": len(items),
        "rows_read": screen.rows_read,
        "ratings_accepted": len(accepted),
        "excluded_rows": screen.excluded_rows(),
        **{f"items_{name}": int((status == name).sum()) for name in ("kept", "not_pertinent", "too_few_ratings")},
        "items_unanswered": int((status == "unanswered").sum()),
    }
    files = {name: str(stage.folder / name) for name in ("items.parquet", "ratings.parquet", "agreement.json")}
    files["report"] = str(stage.folder / REPORT)
    return stage.finish(counts, problems=screen.summary(), fleiss_kappa=agreement["fleiss_kappa"], files=files)


def _agreement(item: np.ndarray, worker: np.ndarray, rating: np.ndarray, status: np.ndarray) -> dict[str, Any]:
    """Fleiss' kappa (categories 1-5) and per-worker agreement over the kept items with two or more ratings."""
    kept = status[item] == "kept"
    item, worker, rating = item[kept], worker[kept], rating[kept]
    count = np.bincount(item)
    shared = count[item] >= 2
    low, high = RATING_SCALE
    codes, rows = np.unique(item[shared], return_inverse=True)
    counts = np.zeros((len(codes), high - low + 1), np.int64)
    np.add.at(counts, (rows, rating[shared].astype(np.int64) - low), 1)
    result: dict[str, Any] = {
        "fleiss_kappa": None,
        "observed_agreement": None,
        "chance_agreement": None,
        "items": len(codes),
        "ratings": int(shared.sum()),
        "ratings_per_item": {str(k): int(v) for k, v in sorted(Counter(counts.sum(axis=1).tolist()).items())},
        "categories": list(range(low, high + 1)),
        "scope": "kept items with two or more ratings; Fleiss' kappa with per-item rater counts",
    }
    if len(codes):
        kappa = fleiss_kappa(counts)
        if not np.isnan(kappa.kappa):
            result["fleiss_kappa"] = round(kappa.kappa, 4)
        result["observed_agreement"] = round(kappa.observed, 4)
        result["chance_agreement"] = round(kappa.expected, 4)
    result["workers"] = worker_agreement(item, worker, rating)
    return result


def agreement_table(agreement: dict[str, Any], limit: int = 20) -> str:
    """The per-worker agreement as a printable table, least agreeing workers first."""
    workers = agreement["workers"]
    lines = [f"{'worker':<20} {'items':>6} {'spearman':>9} {'mean|diff|':>11} {'within 1':>9}"]
    for w in workers[:limit]:
        rho = "-" if w["spearman"] is None else f"{w['spearman']:.3f}"
        lines.append(
            f"{w['worker_id'][:20]:<20} {w['items']:>6} {rho:>9} {w['mean_abs_diff']:>11.3f} {w['within_1']:>9.3f}"
        )
    if len(workers) > limit:
        lines.append(f"... {len(workers) - limit} more workers in agreement.json")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------ step 5: split


def parse_ratios(text: str) -> tuple[float, float, float]:
    """`60:15:25` -> (0.6, 0.15, 0.25)."""
    try:
        parts = tuple(float(p) for p in text.split(":"))
    except ValueError:
        parts = ()
    if len(parts) != 3 or min(parts) < 0 or sum(parts) <= 0:
        raise UserError(f"--ratios {text!r}: expected three non-negative numbers train:validation:test, e.g. 60:15:25")
    total = sum(parts)
    return parts[0] / total, parts[1] / total, parts[2] / total


def sentence_pair_groups(sentence1: pa.ChunkedArray, sentence2: pa.ChunkedArray) -> np.ndarray:
    """A group code per row: rows share one when their two sentences are the same up to case and whitespace, in
    either order; so (s1, s2) from different pair ids and (s2, s1) fall in the same group."""

    def norm(column: pa.ChunkedArray) -> pa.ChunkedArray:
        return pc.utf8_lower(pc.utf8_trim_whitespace(pc.replace_substring_regex(column, r"\s+", " ")))

    a, b = norm(sentence1), norm(sentence2)
    first_is_a = pc.less_equal(a, b)
    key = pc.binary_join_element_wise(pc.if_else(first_is_a, a, b), pc.if_else(first_is_a, b, a), "\x00")
    return pc.dictionary_encode(pa.chunked_array(key).combine_chunks()).indices.to_numpy().astype(np.int64)


def split_sizes(groups: int, ratios: tuple[float, float, float]) -> np.ndarray:
    """Groups per split by largest remainder, so the sizes add up and follow the ratios as closely as possible."""
    target = np.array(ratios) * groups
    sizes = np.floor(target).astype(np.int64)
    sizes[np.argsort(-(target - sizes), kind="stable")[: groups - int(sizes.sum())]] += 1
    return sizes


def assign_splits(
    groups: np.ndarray, pair_ids: np.ndarray, seed: int, ratios: tuple[float, float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """Split index (0 train, 1 validation, 2 test) and the group's seeded position, per row. Whole groups are
    assigned; a group's order comes from a seeded hash of its smallest pair id, not from the row order."""
    n_groups = int(groups.max()) + 1
    smallest = np.full(n_groups, np.iinfo(np.int64).max)
    np.minimum.at(smallest, groups, pair_ids)
    order = np.argsort(hash64(smallest, seed), kind="stable")
    position = np.empty(n_groups, np.int64)
    position[order] = np.arange(n_groups)
    bounds = np.cumsum(split_sizes(n_groups, ratios))
    group_split = np.searchsorted(bounds, position, side="right")
    return group_split[groups], position[groups]


def split(annotate_dir: Path, seed: int, ratios: tuple[float, float, float], force: bool) -> dict:
    """Train/validation/test from the kept rated items: only pairs whose high and low conditions were both kept,
    grouped by sentence pair; written as C-STS Parquet and CSV (docs/schemas.md)."""
    ratings_dir = annotate_dir / RATINGS
    upstream = require_record(ratings_dir, "annotate import --stage ratings")
    stage = StageRun(
        "annotate-split",
        annotate_dir / CSTS,
        {"seed": seed, "ratios": [round(r, 6) for r in ratios]},
        {"ratings": upstream["fingerprint"]},
    )
    if stage.is_done() and not force:
        return _up_to_date(stage)
    items = read_table(ratings_dir / "items.parquet")
    kept = items.filter(pc.equal(items.column("status"), "kept"))
    pair_ids = kept.column("pair_id").to_numpy()
    complete_ids = np.intersect1d(
        pair_ids[kept.column("condition_type").to_numpy(zero_copy_only=False) == "high"],
        pair_ids[kept.column("condition_type").to_numpy(zero_copy_only=False) == "low"],
    )
    complete = kept.filter(pa.array(np.isin(pair_ids, complete_ids)))
    if complete.num_rows == 0:
        raise UserError(
            f"{ratings_dir / 'items.parquet'}: no sentence pair has both its high and its low condition kept; "
            "nothing to split"
        )
    groups = sentence_pair_groups(complete.column("sentence1"), complete.column("sentence2"))
    pair_ids = complete.column("pair_id").to_numpy()
    split_index, position = assign_splits(groups, pair_ids, seed, ratios)
    is_low = complete.column("condition_type").to_numpy(zero_copy_only=False) == "low"
    order = np.lexsort((is_low, pair_ids, position, split_index))
    table = complete.take(pa.array(order))
    names = np.array(SPLITS, dtype=object)[split_index[order]]
    table = pa.table(
        {
            **{name: table.column(name) for name in CSTS_SCHEMA.names if name != "split"},
            "split": pa.array(names, pa.string()),
        },
        schema=CSTS_SCHEMA,
    )

    stage.begin(force=True)
    counts: dict[str, Any] = {
        "kept_items": kept.num_rows,
        "incomplete_pairs_dropped": len(np.setdiff1d(kept.column("pair_id").to_numpy(), complete_ids)),
        "sentence_pairs": int(groups.max()) + 1,
    }
    for name in SPLITS:
        part = table.filter(pc.equal(table.column("split"), name))
        write_table(part, stage.folder / f"{name}.parquet")
        write_csv(part, stage.folder / f"{name}.csv")
        counts[f"{name}_rows"] = part.num_rows
        counts[f"{name}_pairs"] = len(np.unique(part.column("pair_id").to_numpy()))
        if part.num_rows == 0:
            log.warning("annotate split: %s is empty (%d sentence pairs in all)", name, counts["sentence_pairs"])
    return stage.finish(counts, files={name: str(stage.folder / f"{name}.parquet") for name in SPLITS})


def describe(record: dict[str, Any]) -> str:
    """What a step did, for the command line: counts, problems, where the files are."""
    if record.get("status") == "up-to-date":
        return f"up to date: {record['folder']} (nothing to do; --force recomputes)"
    counts, files, stage = record["counts"], record["files"], record["stage"]
    if stage == "annotate-export-conditions":
        return (
            f"{counts['tasks']} condition-writing tasks sampled from {counts['unique_pairs']} kept pairs over "
            f"{counts['strata']} strata\n  upload: {files['hits']}\n  ids:    {files['tasks']}"
        )
    if stage == "annotate-export-ratings":
        return (
            f"{counts['items']} rating tasks ({counts['pairs']} pairs x high/low)\n"
            f"  upload: {files['hits']}\n  ids:    {files['tasks']}"
        )
    if stage == "annotate-split":
        lines = [
            f"{counts['sentence_pairs']} sentence pairs split; {counts['incomplete_pairs_dropped']} pair(s) left out "
            "(not both conditions kept)"
        ]
        lines += [f"  {name:<10} {counts[f'{name}_rows']:>6} rows  {files[name]}" for name in SPLITS]
        return "\n".join(lines)
    problems = ", ".join(f"{name} {n}" for name, n in record["problems"].items()) or "none"
    header = f"{counts['rows_read']} rows read, {counts['excluded_rows']} excluded ({problems}); "
    header += f"report: {files['report']}"
    if stage == "annotate-import-conditions":
        return (
            f"{header}\n{counts['accepted']} of {counts['tasks']} tasks answered -> {counts['triplets']} "
            f"(s1, s2, c) triplets in {files['conditions']}"
        )
    agreement = json.loads(Path(files["agreement.json"]).read_text())
    kappa = "n/a" if agreement["fleiss_kappa"] is None else f"{agreement['fleiss_kappa']:.3f}"
    spread = ", ".join(f"{n} with {k} ratings" for k, n in agreement["ratings_per_item"].items()) or "none"
    return "\n".join(
        [
            header,
            f"items: {counts['items_kept']} kept, {counts['items_not_pertinent']} not pertinent, "
            f"{counts['items_too_few_ratings']} too few ratings, {counts['items_unanswered']} unanswered "
            f"-> {files['items.parquet']}",
            f"Fleiss' kappa {kappa} over {agreement['items']} items with 2+ ratings ({spread}); "
            f"{files['agreement.json']}",
            agreement_table(agreement),
        ]
    )
