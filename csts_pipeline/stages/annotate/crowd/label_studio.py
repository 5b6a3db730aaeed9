"""Label Studio, the self-hosted alternative to MTurk: the labeling config
and task import file of an exported stage, and its JSON export read back as results rows.

The configs are package data (`templates/label_studio/<stage>.xml`), one file per stage, rendered by the HIT pages'
renderer (`pages.render_template`): the guidelines come from the same partials as the pages', and the
qualification test's numbered items from the same repeated blocks; a stage's answer fields
are the `name`s of the config's control tags, the same names an MTurk HIT posts, so an export becomes the same
`ResultRow`s as a batch-results CSV and goes through the same screening, report and Parquet outputs. Drafted
conditions (`annotate draft`) go into the tasks as predictions, which the labeling page shows in the text areas; the
export holds only the submitted text, compared with the draft by the conditions import as for the MTurk page.
`PLATFORM` (at the end) is Label Studio behind the crowd platform interface (crowd/platform.py)."""

from __future__ import annotations

import csv
import json
from importlib import resources
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pyarrow as pa

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.shards import write_atomic
from csts_pipeline.stages.annotate.crowd import pages
from csts_pipeline.stages.annotate.crowd.platform import Read
from csts_pipeline.stages.annotate.crowd.results import Problem, ResultRow
from csts_pipeline.stages.annotate.layout import HITS

FOLDER = "label_studio"  # under <stage>_tasks/
CONFIG = "config.xml"
TASKS_JSON = "tasks.json"
DRAFTS_VERSION = "annotate draft"  # the predictions' model_version: Label Studio shows it on the drafts' tab
# the control tags whose answers a stage reads, and where each keeps its answer in an export's `value`
CONTROLS = {"TextArea": "text", "Choices": "choices", "Rating": "rating", "Number": "number"}


def has_config(stage: str) -> bool:
    """Whether `stage` has a packaged Label Studio config."""
    return (resources.files("csts_pipeline.stages.annotate") / "templates" / FOLDER / f"{stage}.xml").is_file()


def config_text(stage: str, repeats: dict[str, int] | None = None) -> str:
    """The labeling config of `stage`, rendered with the guidelines of its HIT page and `repeats` (the
    qualification test's items: kind -> count)."""
    if not has_config(stage):
        raise UserError(f"--platform label-studio: no Label Studio config for --stage {stage}")
    return pages.render_template(f"{FOLDER}/{stage}.xml", repeats)


def answer_fields(config: str) -> dict[str, str]:
    """The control tags of a config: answer field name -> tag (TextArea, Choices, ...)."""
    root = ElementTree.fromstring(config)
    return {node.attrib["name"]: node.tag for node in root.iter() if node.tag in CONTROLS}


def data_fields(config: str) -> set[str]:
    """The task data a config shows: the `$name` values of its tags."""
    root = ElementTree.fromstring(config)
    return {v[1:] for node in root.iter() for v in node.attrib.values() if v.startswith("$")}


def write_project(tasks_dir: Path, stage: str, repeats: dict[str, int] | None = None) -> dict[str, str]:
    """`label_studio/config.xml` and `label_studio/tasks.json` (one task per row of `hits.csv`, `data` holding
    its columns) beside an exported stage's `hits.csv`; rewritten only when their content changes."""
    hits = tasks_dir / HITS
    if not hits.is_file():
        raise UserError(f"{hits}: not found (run annotate export --stage {stage} first)")
    config = config_text(stage, repeats)
    with hits.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    missing = data_fields(config) - set(rows[0] if rows else {})
    if missing:
        raise UserError(f"{hits}: no column(s) {', '.join(sorted(missing))} that the Label Studio config shows")
    areas = _drafted_areas(config)
    tasks = json.dumps([_task(row, areas) for row in rows], ensure_ascii=False, indent=1).encode()
    folder = tasks_dir / FOLDER
    folder.mkdir(exist_ok=True)
    for name, blob in ((CONFIG, config.encode()), (TASKS_JSON, tasks)):
        path = folder / name
        if not path.is_file() or path.read_bytes() != blob:
            write_atomic(path, lambda handle, blob=blob: handle.write(blob))
    return {"config": str(folder / CONFIG), "tasks": str(folder / TASKS_JSON)}


def _drafted_areas(config: str) -> list[tuple[str, str, str]]:
    """(text area, its toName, the `hits.csv` column of its draft) for each `condition_<kind>` text area of a
    config: the columns `draft_high`/`draft_low` that `annotate draft` adds to the conditions export."""
    areas = ElementTree.fromstring(config).iter("TextArea")
    return [
        (name, area.get("toName", ""), name.replace("condition_", "draft_", 1))
        for area in areas
        if (name := area.get("name", "")).startswith("condition_")
    ]


def _task(row: dict[str, str], areas: list[tuple[str, str, str]]) -> dict[str, Any]:
    """One Label Studio task: the row as its data, and each drafted condition as a prediction of its text area
    (Label Studio's pre-annotation format), which the labeling page shows in the area to keep or edit."""
    task: dict[str, Any] = {"data": row}
    result = [
        {"from_name": name, "to_name": to_name, "type": "textarea", "value": {"text": [row[column]]}}
        for name, to_name, column in areas
        if row.get(column)
    ]
    if result:
        task["predictions"] = [{"model_version": DRAFTS_VERSION, "result": result}]
    return task


# --------------------------------------------------------------------------------------------- reading an export


def read_export(path: Path) -> tuple[list[ResultRow], list[Problem], set[str]]:
    """One results row per annotation of a Label Studio JSON export (Export -> JSON): the task's `data` and the
    annotation's answers by `from_name`, `worker_id` the annotator, `assignment_id` the annotation (its id, or
    the task and the annotator when the export has no id, so a missing id never makes answers duplicates). Rows
    are numbered by annotation (1 = the export's first). A cancelled (skipped) annotation is a `cancelled`
    problem, one whose `task` names another task than the one it sits in an `id_mismatch`; any field of the wrong
    shape is a UserError naming the task."""
    try:
        export = json.loads(path.read_text(encoding="utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(export, list) or not all(isinstance(t, dict) and "data" in t for t in export):
        raise UserError(f"{path}: not a Label Studio JSON export (a list of tasks with data and annotations)")
    rows: list[ResultRow] = []
    problems: list[Problem] = []
    columns = {"worker_id", "assignment_id"}
    number = 0
    for position, task in enumerate(export, start=1):
        data, annotations = _task_shape(path, position, task)
        columns.update(data)
        ident = next((str(v) for k, v in data.items() if k.endswith("_id")), "")
        for annotation in annotations:
            number += 1
            fields = {**data, **_annotation_fields(path, task, position, annotation)}
            problem = _annotation_problem(task, annotation, fields)
            if problem is not None:
                problems.append(Problem(str(path), number, ident, *problem))
                continue
            rows.append(ResultRow(path, number, fields))
    return rows, problems, columns


def _where(task: dict[str, Any], position: int) -> str:
    """How an error names a task: its id, else its place in the export."""
    return f"task {task['id']}" if isinstance(task.get("id"), (int, str)) else f"task #{position} (no id)"


def _task_shape(path: Path, position: int, task: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A task's `data` and `annotations`, checked to be what Label Studio writes: an object and a list of objects
    (no annotations: none or absent)."""
    where = _where(task, position)
    data, annotations = task["data"], task.get("annotations")
    if not isinstance(data, dict):
        raise UserError(f"{path}: {where}: data is {type(data).__name__}, not a JSON object")
    if annotations is None:
        return data, []
    if not isinstance(annotations, list):
        raise UserError(f"{path}: {where}: annotations is {type(annotations).__name__}, not a list")
    for annotation in annotations:
        if not isinstance(annotation, dict):
            raise UserError(f"{path}: {where}: an annotation that is not a JSON object")
        if not isinstance(annotation.get("result", []), (list, type(None))):
            raise UserError(f"{path}: {where}: an annotation's result is not a list")
        if annotation.get("id") is not None and not isinstance(annotation["id"], (int, str)):
            raise UserError(f"{path}: {where}: an annotation id that is not a number or text")
    return data, annotations


def _annotation_problem(task: dict[str, Any], annotation: dict[str, Any], fields: dict[str, Any]) -> tuple | None:
    """(problem, detail) when the annotation is left out: cancelled, or posted for another task."""
    who = f"annotation {fields['assignment_id']} by {fields['worker_id']}"
    posted = annotation.get("task")
    if posted is not None and task.get("id") is not None and str(posted) != str(task["id"]):
        return "id_mismatch", f"{who} names task {posted} but sits in task {task['id']}"
    if annotation.get("was_cancelled"):
        return "cancelled", f"{who} was cancelled (skipped)"
    return None


def _annotation_fields(path: Path, task: dict[str, Any], position: int, annotation: dict[str, Any]) -> dict[str, Any]:
    """An annotation's answers by `from_name` (text areas: their lines joined; single choices: the choice; several
    choices: joined by `|`), its annotator and its assignment: `ls-<id>`, or `ls-<task>-<annotator>` without id."""
    worker = _annotator(annotation.get("completed_by"))
    ident = annotation.get("id")
    task_key = task.get("id", f"#{position}")
    fields: dict[str, Any] = {
        "worker_id": worker,
        "assignment_id": f"ls-{ident}" if ident is not None and str(ident) else f"ls-task{task_key}-{worker}",
    }
    for result in annotation.get("result") or []:
        value = result.get("value") if isinstance(result, dict) else None
        name = result.get("from_name") if isinstance(value, dict) else None
        key = next((k for k in ("text", "choices", "rating", "number") if k in value), None) if name else None
        if key is None:
            continue
        answer = value[key]
        if isinstance(answer, (dict, list)) and not (isinstance(answer, list) and key in ("text", "choices")):
            raise UserError(f"{path}: {_where(task, position)}: answer {name} is {type(answer).__name__}")
        fields[name] = " ".join(map(str, answer)) if key == "text" and isinstance(answer, list) else answer
        if key == "choices" and isinstance(answer, list):
            fields[name] = "|".join(map(str, answer))
    return fields


def _annotator(completed_by: Any) -> str:
    """The worker id of an annotation: the annotator's email where the export has it, else `ls-user-<id>`."""
    if isinstance(completed_by, dict):
        return str(completed_by.get("email") or f"ls-user-{completed_by.get('id', '')}")
    return "" if completed_by is None else f"ls-user-{completed_by}"


# ------------------------------------------------------------------------------------------------- the platform


class LabelStudio:
    """Label Studio behind the crowd platform interface; it has no qualification or block list of its own (its
    annotators are the project's members), so granting and blocking write nothing."""

    name = "label-studio"
    results = "a Label Studio JSON export (.json)"

    def supports(self, stage: str) -> bool:
        return has_config(stage)

    def write_tasks(self, folder: Path, stage: str, hits: pa.Table, repeats: dict[str, int] | None) -> dict[str, str]:
        if not has_config(stage):
            return {}
        found = write_project(folder, stage, repeats)
        return {
            "label_studio": f"{FOLDER}/{CONFIG}",
            "label_studio_tasks": str(Path(found["tasks"]).relative_to(folder)),
        }

    def where(self, folder: Path, stage: str) -> str:
        found = folder / FOLDER
        return f"  Label Studio: {found / CONFIG} (labeling config), {found / TASKS_JSON} (tasks to import)"

    def reads(self, path: Path) -> bool:
        return path.suffix.lower() == ".json"

    def read_results(self, path: Path, required: tuple[str, ...]) -> Read:
        rows, problems, columns = read_export(path)
        return rows, problems, columns | set(required[1:])  # a blank answer is absent from an export; the id is first

    def grant(self, folder: Path, workers: list[tuple[str, bool]], name: str) -> dict[str, str]:
        return {}

    def block(self, folder: Path, blocked: list[tuple[str, str]]) -> dict[str, str]:
        return {}


PLATFORM = LabelStudio()
