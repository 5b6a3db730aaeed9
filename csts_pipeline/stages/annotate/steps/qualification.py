"""The qualification stage, the paper's first: a test mixing condition
writing and rating, exported from a gold file as one HIT, and its import, which scores every worker and writes
who qualified (`qualification/workers.csv`) and the file MTurk's "Manage Workers" upload takes to grant the
qualification. Later imports read `workers.csv` (`qualified_workers`) and leave out other workers' rows.

Scoring: rating items by the mean absolute error against the gold answer (a flag where gold rates, or a rating
where gold flags, counts as FLAG_ERROR), at most `max_rating_error` to pass; written conditions by the page's
own automatic checks (`condition_problems`), every one to pass. A requester's `manual_verdict` (pass/fail) in
workers.csv overrides both and is kept by the next import."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from csts_pipeline.pipeline.checksums import verify_file
from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.records import RECORD, file_fingerprint, fingerprint, read_record, require_record
from csts_pipeline.stages.annotate.crowd import platform, screening, tasks, worker_list
from csts_pipeline.stages.annotate.crowd.files import read_jsonl, write_csv
from csts_pipeline.stages.annotate.crowd.gold_set import (
    FLAG_ERROR,
    KINDS,
    NOT_PERTINENT,
    condition_problems,
    default_gold,
    read_gold,
)
from csts_pipeline.stages.annotate.crowd.results import ResultRow, parse_flag, parse_rating
from csts_pipeline.stages.annotate.labels.agreement import Rating, RatingArrays
from csts_pipeline.stages.annotate.layout import QUALIFICATION, QUALIFICATION_TASKS, REPORT, TASKS
from csts_pipeline.stages.annotate.steps.options import QualificationExportOptions, QualificationImportOptions

WORKERS = "workers.csv"
ANSWERS = "answers.csv"


def hits_columns(items: list[dict[str, Any]]) -> dict[str, str]:
    """The test's one hits.csv row: `test_id`, then each write item's sentences, then each rate item's sentences
    and condition, numbered from 1 within their kind (the page's `${write_sentence1_1}` and so on)."""
    row: dict[str, str] = {}
    for kind, fields in (("write", ("sentence1", "sentence2")), ("rate", ("sentence1", "sentence2", "condition"))):
        for n, item in enumerate((i for i in items if i["kind"] == kind), start=1):
            row |= {f"{kind}_{name}_{n}": item[name] for name in fields}
    return row


def export_qualification(
    annotate_dir: Path, options: QualificationExportOptions = QualificationExportOptions(), *, force: bool = False
) -> dict:
    """The qualification test as one HIT (`hits.csv`, one row; MTurk: one assignment per worker tested), its
    gold answers (`tasks.jsonl`) and its page (`template.html`)."""
    path = options.gold or default_gold()
    items = read_gold(path)
    with OutputFolder(
        "annotate-export-qualification", annotate_dir / QUALIFICATION_TASKS, {}, {"gold": file_fingerprint(path)}
    ) as out:
        if out.up_to_date() and not force:
            return out.unchanged()
        tasks.guard_tasks(out, force)
        test_id = "q-" + hashlib.blake2b(path.read_bytes(), digest_size=8).hexdigest()
        hits = pa.table({name: [value] for name, value in {"test_id": test_id, **hits_columns(items)}.items()})
        counts = {kind: sum(item["kind"] == kind for item in items) for kind in KINDS}

        out.begin(force=True)
        written = tasks.write_task_files(
            out.staging, hits, [{"test_id": test_id, "items": items}], QUALIFICATION, counts
        )
        files = {key: str(out.folder / name) for key, name in written.items()}
        gold_name = "the default gold set" if options.gold is None else str(options.gold)
        return out.finish({"write_items": counts["write"], "rate_items": counts["rate"]}, gold=gold_name, files=files)


# ------------------------------------------------------------------------------------------------------- import

WORKER_SCHEMA = pa.schema(
    [
        ("worker_id", pa.string()),
        ("assignment_id", pa.string()),
        ("rating_items", pa.int64()),
        ("rating_error", pa.float64()),  # mean absolute error against gold
        ("condition_items", pa.int64()),
        ("conditions_passed", pa.int64()),  # written pairs passing every automatic check
        ("auto_qualified", pa.bool_()),
        ("manual_verdict", pa.string()),  # pass, fail or empty: the requester's, kept across imports
        ("qualified", pa.bool_()),
    ]
)
ANSWER_SCHEMA = pa.schema(
    [
        ("worker_id", pa.string()),
        ("item_id", pa.string()),
        ("kind", pa.string()),
        ("condition_high", pa.string()),
        ("condition_low", pa.string()),
        ("rating", pa.int64()),
        ("not_pertinent", pa.bool_()),
        ("gold_rating", pa.string()),
        ("error", pa.float64()),
        ("problems", pa.string()),
    ]
)


def import_qualification(
    annotate_dir: Path,
    results: list[Path],
    options: QualificationImportOptions = QualificationImportOptions(),
    *,
    force: bool = False,
) -> dict:
    """Score each worker's first valid test (rules in the module docstring); write `workers.csv`, every answer
    with its error or problems (`answers.csv`), the MTurk grant file and the per-row report."""
    max_error, name = options.max_rating_error, options.qualification_name
    if not 0 <= max_error <= FLAG_ERROR:
        raise UserError(f"--max-rating-error must be in [0, {FLAG_ERROR:g}] (got {max_error})")
    if not name.strip() or "," in name:
        raise UserError(f"--qualification-name {name!r}: give the qualification type's name, without commas")
    tasks_dir = annotate_dir / QUALIFICATION_TASKS
    upstream = require_record(tasks_dir, "annotate export --stage qualification")
    verdicts = read_verdicts(annotate_dir / QUALIFICATION / WORKERS)
    inputs = {"tasks": upstream["fingerprint"], "results": screening.results_fingerprint(results)}
    inputs["verdicts"] = fingerprint(sorted(verdicts.items()))
    params = {"max_rating_error": max_error, "qualification_name": name}
    with OutputFolder(
        "annotate-import-qualification", annotate_dir / QUALIFICATION, params, inputs, reads=(tasks_dir,)
    ) as out:
        if out.up_to_date() and not force:
            return out.unchanged()
        (test,) = read_jsonl(tasks_dir / TASKS)
        screen, answers = _screen_tests(test["test_id"], results, tasks_dir / TASKS)
        if not answers:
            raise screen.nothing_valid(results, "qualification answers")
        workers, rows = [], []
        for worker, row in answers.items():
            scored, answered = _score(test["items"], row, max_error, verdicts.get(worker, ""))
            workers.append(scored)
            rows += answered

        out.begin(force=True)
        screen.write_report(out.staging / REPORT)
        write_csv(pa.Table.from_pylist(workers, schema=WORKER_SCHEMA), out.staging / WORKERS)
        write_csv(pa.Table.from_pylist(rows, schema=ANSWER_SCHEMA), out.staging / ANSWERS)
        granted = platform.grant(out.staging, [(w["worker_id"], bool(w["qualified"])) for w in workers], name)
        counts = {
            "rows_read": screen.rows_read,
            "excluded_rows": screen.excluded_rows(),
            "workers": len(workers),
            "qualified": sum(w["qualified"] for w in workers),
            "manual_verdicts": sum(bool(w["manual_verdict"]) for w in workers),
        }
        files = {key: str(out.folder / value) for key, value in (("workers", WORKERS), ("answers", ANSWERS))}
        files |= {key: str(out.folder / value) for key, value in granted.items()}
        files |= {"report": str(out.folder / REPORT)}
        return out.finish(counts, problems=screen.summary(), files=files, **params)


def _screen_tests(test_id: str, results: list[Path], tasks_file: Path) -> tuple[screening.Screen, dict[str, Any]]:
    """Every results row checked; each worker's first valid row."""
    screen = screening.Screen({test_id: 0}, "test_id", tasks_file)
    answers: dict[str, ResultRow] = {}
    for path in results:
        rows, problems = screening.read_results(path, ("test_id", "worker_id"))
        screen.problems.extend(problems)
        for row in rows:
            found = screen.check(row)
            worker = row.text("worker_id")
            if not worker:
                screen.add(row, "missing_worker", "no worker_id")
            elif worker in answers and not found:
                screen.add(
                    row, "duplicate_worker", f"worker {worker} already took the test at {answers[worker].where()}"
                )
            elif not found:
                answers[worker] = row
    return screen, answers


def _score(items: list[dict], row: ResultRow, max_error: float, verdict: str) -> tuple[dict, list[dict]]:
    """One worker's row in workers.csv and their answers, item by item, for answers.csv."""
    worker, numbers, answers = row.text("worker_id"), dict.fromkeys(KINDS, 0), []
    for item in items:
        numbers[item["kind"]] += 1
        n = numbers[item["kind"]]
        answer = {"worker_id": worker, "item_id": item["item_id"], "kind": item["kind"], "problems": ""}
        if item["kind"] == "write":
            high, low = row.text(f"condition_high_{n}"), row.text(f"condition_low_{n}")
            found = condition_problems(high, low, item["sentence1"], item["sentence2"])
            answer |= {"condition_high": high, "condition_low": low, "problems": ";".join(found)}
        else:
            flag = parse_flag(row.fields.get(f"not_pertinent_{n}")) is True
            rating = None if flag else parse_rating(row.fields.get(f"rating_{n}"))
            gold = item["gold_rating"]
            if flag or rating is None or gold == NOT_PERTINENT:
                error = 0.0 if flag and gold == NOT_PERTINENT else FLAG_ERROR
            else:
                error = float(abs(rating - int(float(gold))))
            problem = "" if flag or rating is not None else "missing_rating"
            answer |= {
                "rating": rating,
                "not_pertinent": flag,
                "gold_rating": gold,
                "error": error,
                "problems": problem,
            }
        answers.append(answer)
    rated = [a["error"] for a in answers if a["kind"] == "rate"]
    written = [a for a in answers if a["kind"] == "write"]
    mean_error = round(sum(rated) / len(rated), 3)
    passed = sum(not a["problems"] for a in written)
    auto = mean_error <= max_error and passed == len(written)
    scored = {
        "worker_id": worker,
        "assignment_id": row.text("assignment_id") or None,
        "rating_items": len(rated),
        "rating_error": mean_error,
        "condition_items": len(written),
        "conditions_passed": passed,
        "auto_qualified": auto,
        "manual_verdict": verdict,
        "qualified": verdict == "pass" if verdict else auto,
    }
    return scored, answers


def read_verdicts(path: Path) -> dict[str, str]:
    """The requester's manual verdicts in a workers.csv (worker id -> pass/fail), one per worker by the rule of
    `worker_list` (the latest dated verdict; undated ones that disagree: fail); none when there is no file."""
    if not path.is_file():
        return {}
    found = worker_list.standings(path, worker_list.read_entries(path, ("worker_id",), parse_flag))
    return {worker: standing for worker, standing in found.items() if standing in worker_list.VERDICTS}


def qualified_workers(annotate_dir: Path, workers: Path | None) -> screening.Qualified | None:
    """The qualified workers of `workers` (a workers.csv), else of `<annotate>/qualification/workers.csv` when
    it exists; a filled `manual_verdict` decides over `qualified`, and a worker listed both ways is not
    qualified (`worker_list`). None: no qualification to apply."""
    path = workers or annotate_dir / QUALIFICATION / WORKERS
    if workers is None and not path.is_file():
        return None
    if not path.is_file():
        raise UserError(f"{path}: workers file not found")
    entries = worker_list.read_entries(path, ("worker_id", "qualified"), parse_flag)
    found = worker_list.standings(path, entries)
    return screening.Qualified(frozenset(w for w, standing in found.items() if standing in ("pass", "qualified")), path)


def workers_input(qualified: screening.Qualified | None) -> dict[str, str]:
    """The stage-record input of an import that applies a qualification (nothing when none applies)."""
    return {} if qualified is None else {"workers": file_fingerprint(qualified.file)}


QUALIFICATION_IMPORT = "annotate import --stage qualification --results FILE"


def answers_file(annotate_dir: Path) -> Path | None:
    """`<annotate>/qualification/answers.csv` where a qualification import wrote it, checked against that import's
    record (size and checksum, as every stage's reader checks its input): a file cut, emptied or deleted since
    would measure the people on fewer answers, or on none, without a word. Only this file is checked: a
    requester edits workers.csv's verdicts by hand."""
    folder = annotate_dir / QUALIFICATION
    path, record = folder / ANSWERS, read_record(folder)
    entry = None if record is None else (record.get("output_files") or {}).get(ANSWERS)
    if entry is None and not path.is_file():
        return None
    if record is None:
        problem = f"{path}: no qualification import record beside it ({folder / RECORD})"
    else:
        problem = f"{path}: not listed in {folder / RECORD}" if entry is None else verify_file(path, entry)
    if problem:
        raise UserError(
            f"{problem}: the qualification answers are incomplete or corrupt; rebuild them with "
            f"`csts-pipeline {QUALIFICATION_IMPORT} --force`"
        )
    return path


def folder_input(annotate_dir: Path, used: bool) -> dict[str, str]:
    """The ratings import's input from the qualification folder it read (its workers.csv or answers.csv): the
    folder's fingerprint, so a qualification re-import makes the ratings import stale for every step that reads
    it (layout.ratings_sources)."""
    record = read_record(annotate_dir / QUALIFICATION) if used else None
    return {} if record is None or "fingerprint" not in record else {QUALIFICATION: str(record["fingerprint"])}


def test_answers(path: Path, people: set[str]) -> tuple[RatingArrays, np.ndarray] | None:
    """The `people`'s ratings on the qualification test's rating items whose gold is a rating, as the rater model's
    evidence about them (aggregation/trust.py: the people's noise measured on items of known label): the ratings
    (items indexed 0.. in the file's order) and each item's gold; None where none of them rated one."""
    try:
        table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(column_types=ANSWER_SCHEMA)).to_pylist()
    except (pa.ArrowInvalid, OSError) as exc:
        raise UserError(f"{path}: not a readable qualification answers file ({str(exc).splitlines()[0]})") from None
    rows = [r for r in table if r["kind"] == "rate" and r["worker_id"] in people and r["rating"] is not None]
    rows = [r for r in rows if not r["not_pertinent"] and parse_rating(r["gold_rating"]) is not None]
    if not rows:
        return None
    items = {item: n for n, item in enumerate(dict.fromkeys(r["item_id"] for r in rows))}
    truth = np.zeros(len(items), np.int64)
    for r in rows:
        truth[items[r["item_id"]]] = parse_rating(r["gold_rating"])
    found = [Rating(items[r["item_id"]], str(r["worker_id"]), "", int(r["rating"]), False) for r in rows]
    return RatingArrays.of(found), truth
