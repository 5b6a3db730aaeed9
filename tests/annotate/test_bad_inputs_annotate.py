"""The annotation surfaces refuse what is not valid with one line (exit 2) and leave every output as it was:
option values read as defaults, audit labels off the scale, licences the Hub does not know, gold files that are
not UTF-8, and exports aimed at a folder the pipeline owns (issue 38, items 5 and 6)."""

from __future__ import annotations

import csv
import json
import logging
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from csts_pipeline.pipeline.records import write_json
from csts_pipeline.stages.annotate.crowd.gold_set import default_gold
from csts_pipeline.stages.annotate.release.licenses import hub_license, hub_licenses
from csts_pipeline.stages.annotate.steps import csts_split
from tests.annotate.test_annotate import (  # noqa: F401
    cli,
    cli_error,
    kept,
    kept_dir,
    rated,
    read_report,
    read_tasks,
    simulated_conditions,
    write_results,
)
from tests.conftest import reseal

REPO = Path(__file__).resolve().parents[2]
LABELS = REPO / "docs" / "examples" / "annotate" / "audit_labels.csv"
REFERENCE = REPO / "docs" / "examples" / "annotate" / "audit_reference.csv"


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def split_work(tmp_path: Path, rated: Path) -> Path:  # noqa: F811
    """A work folder with a filter record and a split annotate folder, named by a manifest `pub.yaml`."""
    work = tmp_path / "work"
    shutil.copytree(rated, work / "annotate")
    csts_split.split(work / "annotate")
    write_json(work / "filter" / "_stage.json", {"stage": "filter", "status": "done"})
    reseal(work / "filter")
    (tmp_path / "pub.yaml").write_text(
        f"name: pub\nwork_dir: {work}\ndata: {{format: coco, captions: {tmp_path}/c.json, images: {tmp_path}}}\n"
    )
    return work


# ------------------------------------------------------------------------------------- options read as defaults


@pytest.mark.parametrize(
    ("option", "line"), [("--n", "--n must be positive (got 0)"), ("--bins", "--bins must be positive (got 0)")]
)
def test_export_n_0_and_bins_0_are_refused_not_read_as_defaults(tmp_path: Path, kept_dir: Path, option: str, line: str):  # noqa: F811
    out = tmp_path / "annotate"
    cli("annotate", "export", "--stage", "conditions", "--input", kept_dir, "--n", "10", "--out", out)
    before = snapshot(out)
    assert (
        cli_error(
            "annotate", "export", "--stage", "conditions", "--input", kept_dir, option, "0", "--out", out, "--force"
        )
        == f"error: {line}"
    )
    assert snapshot(out) == before


@pytest.mark.parametrize("ratios", ["nan:1:1", "inf:1:1", "1:-inf:1", "1:1:nan"])
def test_split_ratios_nan_and_inf_are_one_line(rated: Path, ratios: str):  # noqa: F811
    before = snapshot(rated)
    assert cli_error("annotate", "split", "--out", rated, "--ratios", ratios) == (
        f"error: --ratios {ratios!r}: expected three non-negative numbers train:validation:test, e.g. 60:15:25"
    )
    assert snapshot(rated) == before


def test_a_latin1_gold_file_is_one_line_naming_it(tmp_path: Path, rated: Path):  # noqa: F811
    gold = tmp_path / "gold.csv"
    text = default_gold().read_text(encoding="utf-8").replace("A man", "A café man", 1)
    gold.write_bytes(text.encode("latin-1"))
    before = snapshot(rated)
    line = cli_error(
        "annotate",
        "export",
        "--stage",
        "ratings",
        "--out",
        rated,
        "--gold-share",
        "0.1",
        "--gold",
        gold,
        "--force",
        "--input",
        rated.parent / "kept",
    )
    assert line.startswith(f"error: {gold}: not UTF-8 text (byte ") and line.endswith("save it as UTF-8"), line
    assert snapshot(rated) == before
    line = cli_error("annotate", "export", "--stage", "qualification", "--out", rated, "--gold", gold)
    assert line.startswith(f"error: {gold}: not UTF-8 text"), line


# --------------------------------------------------------------------------------------------------- audit labels


@pytest.mark.parametrize(("label", "file"), [(9, "labels"), (0, "labels"), (-2, "reference"), (6, "reference"),
                                              (-1, "labels")])  # fmt: skip
def test_audit_labels_off_the_scale_are_errors_naming_the_row(tmp_path: Path, label: int, file: str):
    source = LABELS if file == "labels" else REFERENCE
    lines = source.read_text().splitlines()
    assert lines[0].endswith(",label")
    lines[4] = f"{lines[4].rsplit(',', 1)[0]},{label}"  # row 5, the header being row 1
    bad = tmp_path / f"{file}.csv"
    bad.write_text("\n".join(lines) + "\n")
    given = {"labels": LABELS, "reference": REFERENCE} | {file: bad}
    allowed = "1-5" if file == "labels" else "1-5 or -1 (rejected)"
    assert (
        cli_error(
            "annotate", "audit", "--labels", given["labels"], "--reference", given["reference"], "--out", tmp_path / "a"
        )
        == f"error: {bad}: row 5: label {label} is not on the scale ({allowed}); 1 such row(s)"
    )
    assert not (tmp_path / "a").exists()


def test_the_reference_may_reject_with_minus_1(tmp_path: Path):
    assert "conditions rejected by the reference: 1" in cli(
        "annotate", "audit", "--labels", LABELS, "--reference", REFERENCE, "--out", tmp_path / "a"
    )


# -------------------------------------------------------------------------------------------------------- licence


def test_licences_are_the_hubs_ids_normalised():
    assert hub_licenses()[:2] == ("apache-2.0", "mit") and "other" in hub_licenses() and len(hub_licenses()) == 69
    assert hub_license("CC BY 4.0") == hub_license("cc-by-4.0") == hub_license(" CC_BY_4.0 ") == "cc-by-4.0"
    assert hub_license("MIT") == "mit" and hub_license("Other") == "other"


@pytest.mark.parametrize("given", ["", "cc by 5.0", "GPL 3", "public domain"])
def test_an_unknown_licence_is_one_line_and_writes_nothing(tmp_path: Path, split_work: Path, given: str):
    out = tmp_path / "hf"
    line = cli_error("export", "-m", tmp_path / "pub.yaml", "--out", out, "--license", given)
    assert line.startswith(f"error: --license {given!r}: not a licence identifier the Hugging Face Hub accepts")
    assert line.endswith("or --license other and add the licence's text to the folder")
    assert not out.exists()


def test_the_card_gets_the_normalised_licence(tmp_path: Path, split_work: Path):
    cli("export", "-m", tmp_path / "pub.yaml", "--out", tmp_path / "hf", "--license", "CC BY-SA 4.0")
    assert "\nlicense: cc-by-sa-4.0\n" in (tmp_path / "hf" / "README.md").read_text()


# ------------------------------------------------------------------------------------ exports into owned folders


@pytest.mark.parametrize("target", ["filter", "annotate/csts", "annotate", "annotate/csts/hf", "train", "."])
def test_the_export_refuses_a_pipeline_folder_at_once(tmp_path: Path, split_work: Path, target: str):
    out = (split_work / target) if target != "." else split_work
    before = snapshot(split_work)
    line = cli_error("export", "-m", tmp_path / "pub.yaml", "--out", out, "--force")
    assert line.startswith(f"error: {out}: inside or above ") and line.endswith("export to a folder of its own")
    assert snapshot(split_work) == before


def test_the_export_refuses_a_folder_holding_another_steps_record(tmp_path: Path, split_work: Path):
    other = tmp_path / "elsewhere"
    shutil.copytree(split_work / "filter", other)
    before = snapshot(other)
    for out in (other, other / "hf"):
        line = cli_error("export", "-m", tmp_path / "pub.yaml", "--out", out, "--force")
        assert line == f"error: {out}: {other / '_stage.json'} belongs to another step; export to a folder of its own"
    assert snapshot(other) == before
    # a folder of its own is replaced whole as before, and its own record is no obstacle
    cli("export", "-m", tmp_path / "pub.yaml", "--out", tmp_path / "hf")
    cli("export", "-m", tmp_path / "pub.yaml", "--out", tmp_path / "hf", "--force")


def test_the_export_into_its_own_csts_folder_without_a_manifest_answers_at_once(split_work: Path):
    annotate_dir = split_work / "annotate"
    before = snapshot(annotate_dir)
    line = cli_error("export", "--annotate", annotate_dir, "--out", annotate_dir / "csts", "--force")
    assert (
        line == f"error: {annotate_dir / 'csts'}: inside or above {annotate_dir.resolve()}, a pipeline folder; "
        "export to a folder of its own"
    )
    assert snapshot(annotate_dir) == before


# ------------------------------------------------------------------------------------ answers stay on their item


def rating_rows(tasks: list[dict], workers: tuple[str, ...] = ("R1", "R2", "R3")) -> list[dict]:
    """Every item rated 4 by each of `workers`, as a plain results table."""
    return [
        {"item_id": t["item_id"], "worker_id": w, "assignment_id": f"A-{w}-{i}", "rating": 4, "not_pertinent": ""}
        for i, t in enumerate(tasks)
        for w in workers
    ]


def test_an_answer_posted_for_another_item_is_an_id_mismatch(tmp_path: Path, rated: Path):  # noqa: F811
    tasks = read_tasks(rated / "ratings_tasks")
    rows = rating_rows(tasks)
    results = tmp_path / "batch.csv"
    with results.open("w", newline="") as handle:  # MTurk's batch results: the HIT's id and the posted one
        writer = csv.writer(handle)
        writer.writerow(["HITId", "Input.item_id", "WorkerId", "AssignmentId", "Answer.item_id", "Answer.rating"])
        for n, row in enumerate(rows):
            posted = tasks[1]["item_id"] if n in (0, 6) else row["item_id"]
            writer.writerow([f"H{n}", row["item_id"], row["worker_id"], row["assignment_id"], posted, 4])
    output = cli("annotate", "import", "--stage", "ratings", "--out", rated, "--results", results, "--force")
    assert output.splitlines()[0] == (
        f"{len(rows)} rows read, 2 excluded (id_mismatch 2); report: {rated / 'ratings' / 'report.csv'}"
    )
    with (rated / "ratings" / "report.csv").open(newline="") as handle:
        report = list(csv.DictReader(handle))
    assert [(r["row"], r["id"], r["problem"], r["detail"]) for r in report] == [
        (str(row), rows[n]["item_id"], "id_mismatch",
         f"answer posted for item_id {tasks[1]['item_id']!r} in the HIT of {rows[n]['item_id']!r}")
        for n, row in ((0, 2), (6, 8))
    ]  # fmt: skip
    ratings = pq.read_table(rated / "ratings" / "ratings.parquet").to_pylist()
    counted = {(r["item_id"], r["worker_id"]) for r in ratings}
    assert (tasks[0]["item_id"], "R1") not in counted and (tasks[2]["item_id"], "R1") not in counted
    assert (tasks[1]["item_id"], "R1") in counted and len(ratings) == len(rows) - 2


def ls_export(tasks: list[dict], annotations: int = 3, ids: bool = True) -> list[dict]:
    """A Label Studio JSON export of the rating tasks, each rated 4 by `annotations` annotators."""
    export = []
    for n, task in enumerate(tasks, start=1):
        made = []
        for user in range(annotations):
            result = [{"from_name": "rating", "to_name": "condition", "type": "choices", "value": {"choices": ["4"]}}]
            made.append({"completed_by": user + 1, "result": result, "was_cancelled": False, "task": n})
            if ids:
                made[-1]["id"] = n * 10 + user
        export.append({"id": n, "data": {"item_id": task["item_id"]}, "annotations": made})
    return export


def test_a_label_studio_export_without_annotation_ids_is_read_whole(tmp_path: Path, rated: Path):  # noqa: F811
    tasks = read_tasks(rated / "ratings_tasks")[:24]
    path = tmp_path / "export.json"
    path.write_text(json.dumps(ls_export(tasks, ids=False)))
    output = cli("annotate", "import", "--stage", "ratings", "--out", rated, "--results", path, "--force")
    assert output.splitlines()[0] == f"72 rows read, 0 excluded (none); report: {rated / 'ratings' / 'report.csv'}"
    ratings = pq.read_table(rated / "ratings" / "ratings.parquet").to_pylist()
    assert len(ratings) == 72 and ratings[0]["assignment_id"] == "ls-task1-ls-user-1"
    # the same export given twice is still caught: its annotations are the same assignments
    line = cli("annotate", "import", "--stage", "ratings", "--out", rated, "--results", path, "--results", path,
               "--force").splitlines()[0]  # fmt: skip
    assert line == f"144 rows read, 72 excluded (duplicate_assignment 72); report: {rated / 'ratings' / 'report.csv'}"


def test_a_label_studio_annotation_of_another_task_is_an_id_mismatch(tmp_path: Path, rated: Path):  # noqa: F811
    tasks = read_tasks(rated / "ratings_tasks")[:4]
    export = ls_export(tasks)
    export[2]["annotations"][1]["task"] = 4
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export))
    cli("annotate", "import", "--stage", "ratings", "--out", rated, "--results", path, "--force")
    with (rated / "ratings" / "report.csv").open(newline="") as handle:
        report = [(r["row"], r["id"], r["problem"], r["detail"]) for r in csv.DictReader(handle)]
    assert report == [
        ("8", tasks[2]["item_id"], "id_mismatch", "annotation ls-31 by ls-user-2 names task 4 but sits in task 3")
    ]


@pytest.mark.parametrize(
    ("damage", "line"),
    [
        (lambda e: e[1].update(annotations=5), "task 2: annotations is int, not a list"),
        (lambda e: e[1].update(data=[1]), "task 2: data is list, not a JSON object"),
        (lambda e: e[1]["annotations"][0].update(result=5), "task 2: an annotation's result is not a list"),
        (lambda e: e[1]["annotations"].append(7), "task 2: an annotation that is not a JSON object"),
        (lambda e: e[1]["annotations"][0].update(id={"a": 1}), "task 2: an annotation id that is not a number or text"),
        (lambda e: (e[1].pop("id"), e[1].update(annotations="x")), "task #2 (no id): annotations is str, not a list"),
        (
            lambda e: e[1]["annotations"][0]["result"][0]["value"].update(choices={"a": 1}),
            "task 2: answer rating is dict",
        ),
    ],
)
def test_a_label_studio_export_of_the_wrong_shape_is_one_line_naming_the_task(
    tmp_path: Path,
    rated: Path,  # noqa: F811
    damage,
    line: str,
):
    export = ls_export(read_tasks(rated / "ratings_tasks")[:3])
    damage(export)
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export))
    before = snapshot(rated)
    assert cli_error("annotate", "import", "--stage", "ratings", "--out", rated, "--results", path, "--force") == (
        f"error: {path}: {line}"
    )
    assert snapshot(rated) == before


# ------------------------------------------------------------------------------------- contradictory worker files

CONDITION_WRITERS = ("W0", "W1", "W2", "W3", "W4")  # simulated_conditions' writers


@pytest.mark.parametrize(
    ("rows", "qualified", "said"),
    [
        (["W0,true,,", "W0,false,,"], False, "qualified true and false, rows 2, 3"),
        (["W0,false,,", "W0,true,,"], False, "qualified true and false, rows 2, 3"),
        (["W0,true,fail,", "W0,true,pass,"], False, "manual_verdict pass and fail, undated, rows 2, 3"),
        (["W0,true,pass,2026-03-01", "W0,true,fail,2026-03-01"], False,
         "manual_verdict pass and fail on the same date, rows 2, 3"),
        (["W0,false,fail,2026-01-05", "W0,false,pass,2026-02-01T09:30"], True, None),
        (["W0,false,pass,2026-02-01", "W0,true,fail,2026-01-05", "W0,true,,"], True, None),
        (["W0,true,pass,2026-01-05", "W0,true,fail,2026-02-01"], False, None),
        (["W0,true,pass,", "W0,true,fail,2026-01-01"], False, None),  # a dated verdict over an undated one
    ],
)  # fmt: skip
def test_a_worker_listed_both_ways_follows_one_rule(
    tmp_path: Path,
    rated: Path,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
    rows: list[str],
    qualified: bool,
    said: str | None,
):
    workers = tmp_path / "workers.csv"
    others = [f"{w},true,," for w in CONDITION_WRITERS[1:]]
    workers.write_text("\n".join(["worker_id,qualified,manual_verdict,verdict_date", *rows, *others]) + "\n")
    tasks = read_tasks(rated / "conditions_tasks")
    results = write_results(tmp_path / "c.csv", simulated_conditions(tasks))
    with caplog.at_level(logging.WARNING, logger="stages"):
        cli("annotate", "import", "--stage", "conditions", "--out", rated, "--results", results, "--workers", workers,
            "--force")  # fmt: skip
    left_out = {r[1] for r in read_report(rated / "conditions") if r[2] == "not_qualified"}
    w0_tasks = {t["task_id"] for n, t in enumerate(tasks) if n % 5 == 0}
    assert left_out == (set() if qualified else w0_tasks)
    lines = [r.getMessage() for r in caplog.records if "listed both ways" in r.getMessage()]
    expected = [
        f"{workers}: worker W0 is listed both ways ({said}): not qualified; date the manual verdicts "
        "(verdict_date) to let the latest decide"
    ]
    assert lines == (expected if said else [])


def test_a_bad_verdict_date_is_one_line(tmp_path: Path, rated: Path):  # noqa: F811
    workers = tmp_path / "workers.csv"
    workers.write_text("worker_id,qualified,manual_verdict,verdict_date\nW0,true,pass,last tuesday\n")
    results = write_results(tmp_path / "c.csv", simulated_conditions(read_tasks(rated / "conditions_tasks")))
    assert (
        cli_error(
            "annotate", "import", "--stage", "conditions", "--out", rated, "--results", results, "--workers", workers
        )
        == f"error: {workers}: row 2: verdict_date 'last tuesday' is not an ISO 8601 date or time"
    )
