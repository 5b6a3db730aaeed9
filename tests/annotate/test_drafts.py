"""Drafted conditions: SmolLM2 (testing.smollm2) drafts a high and a low condition for 4 of the documented
sample's condition-writing tasks; the drafts pass the page's checks or say why; the conditions export prefills the HIT
page's fields with them and hands them to Label Studio as predictions; the import records, per condition, whether
a draft was accepted, edited (with the edit distance) or the condition written. Browser-free: the page is filled
as MTurk fills it (pages.fill) and its form fields read back."""

from __future__ import annotations

import csv
import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from csts_pipeline.stages.annotate.crowd import pages
from csts_pipeline.stages.annotate.crowd.kept import kept_source
from csts_pipeline.stages.annotate.steps.condition_check import check_conditions
from csts_pipeline.stages.annotate.steps.conditions import export_conditions, import_conditions
from csts_pipeline.stages.annotate.steps.drafts import DRAFTS, draft, edit_distance, origin, page_problem
from csts_pipeline.stages.annotate.steps.options import ConditionsExportOptions
from csts_pipeline.testing.smollm2 import local_model

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "annotate"


def export(folder: Path, n: int = 8) -> dict:
    return export_conditions(folder, kept_source(None, EXAMPLE / "kept.csv"), ConditionsExportOptions(n=n))


def rows_of(path: Path) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


class Inputs(HTMLParser):
    """The text inputs of a filled page: name -> value."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, str | None] = {}

    def handle_starttag(self, tag: str, attrs: list) -> None:
        found = dict(attrs)
        if tag == "input" and found.get("type") == "text":
            self.values[found["name"]] = found.get("value")


def inputs_of(page: str) -> dict[str, str | None]:
    parser = Inputs()
    parser.feed(page)
    return parser.values


@pytest.fixture(scope="module")
def drafted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 of the sample's pairs exported, drafted by SmolLM2 (its yes/no not asked for a verdict: --min-applies 0,
    as its P(yes) sits near 0.2 whatever the condition), and exported again with the drafts."""
    folder = tmp_path_factory.mktemp("drafted") / "annotate"
    export(folder, 4)
    draft(folder, local_model(), min_applies=0.0)
    export(folder, 4)  # the same tasks: no --force needed to add drafts
    return folder


@pytest.mark.slow
def test_drafts_pass_the_pages_checks_or_say_why(drafted: Path, tmp_path: Path) -> None:
    drafts = [json.loads(line) for line in (drafted / DRAFTS / "drafts.jsonl").read_text().splitlines()]
    tasks = [json.loads(line) for line in (drafted / "conditions_tasks" / "tasks.jsonl").read_text().splitlines()]
    assert [d["task_id"] for d in drafts] == [t["task_id"] for t in tasks]
    for found, task in zip(drafts, tasks):
        for kind in ("high", "low"):
            text, problem = found[f"draft_{kind}"], found[f"problem_{kind}"]
            other = found["draft_low" if kind == "high" else "draft_high"]
            assert problem == page_problem(text, other, (task["sentence1"], task["sentence2"]), kind == "low")
            assert 0 <= found[f"p_applies_{kind}"] <= 1 and task[f"draft_{kind}"] == ("" if problem else text)
    assert sum(t["draft_high"] != "" for t in tasks) >= 2  # SmolLM2 answers the few-shot prompt with short phrases
    record = json.loads((drafted / DRAFTS / "_stage.json").read_text())
    assert record["cost"]["prompts"] == 16 and record["prompts"]["draft_high"]["version"] == 1
    assert draft(drafted, local_model(), min_applies=0.0)["status"] == "up-to-date"
    strict = shutil.copytree(drafted, tmp_path / "strict")  # the default threshold: the cache answers everything
    again = draft(strict, local_model())
    assert again["counts"]["answers_computed"] == 0 and again["cost"]["prompts"] == 0
    redrafted = [json.loads(line) for line in (strict / DRAFTS / "drafts.jsonl").read_text().splitlines()]
    for before, found in zip(drafts, redrafted):
        for kind in ("high", "low"):
            problem = before[f"problem_{kind}"] or ("does_not_apply" if found[f"p_applies_{kind}"] < 0.5 else None)
            assert found[f"problem_{kind}"] == problem


@pytest.mark.slow
def test_the_page_and_label_studio_offer_the_drafts(drafted: Path, tmp_path: Path) -> None:
    tasks_dir = drafted / "conditions_tasks"
    hits = rows_of(tasks_dir / "hits.csv")
    assert list(hits[0]) == ["task_id", "sentence1", "sentence2", "draft_high", "draft_low"]
    page = (tasks_dir / "template.html").read_text()
    for row in hits:
        shown = inputs_of(pages.fill(page, row))
        assert shown == {"condition_high": row["draft_high"], "condition_low": row["draft_low"]}
    assert "data-drafted" in page
    ls_tasks = json.loads((tasks_dir / "label_studio" / "tasks.json").read_text())
    for task, row in zip(ls_tasks, hits):
        results = [r for p in task.get("predictions", []) for r in p["result"]]
        predicted = {r["from_name"]: (r["to_name"], r["value"]["text"]) for r in results}
        expected = {
            "condition_high": ("sentence1", [row["draft_high"]]),
            "condition_low": ("sentence2", [row["draft_low"]]),
        }
        assert predicted == {name: value for name, value in expected.items() if value[1] != [""]}
    plain = tmp_path / "plain"
    export(plain)  # no drafts: the page and hits.csv as before
    assert list(rows_of(plain / "conditions_tasks" / "hits.csv")[0]) == ["task_id", "sentence1", "sentence2"]
    plain_page = (plain / "conditions_tasks" / "template.html").read_text()
    assert "data-drafted" not in plain_page and set(inputs_of(plain_page).values()) == {None}


@pytest.mark.slow
def test_the_import_records_accepted_edited_and_written(drafted: Path, tmp_path: Path) -> None:
    hits = [row for row in rows_of(drafted / "conditions_tasks" / "hits.csv") if row["draft_high"] and row["draft_low"]]
    assert len(hits) >= 2
    answers = [
        (hits[0], hits[0]["draft_high"], hits[0]["draft_low"]),  # both accepted as drafted
        (hits[1], hits[1]["draft_high"], hits[1]["draft_low"].rstrip(".") + " and their ages."),  # low edited
    ]
    results = tmp_path / "results.csv"
    with results.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["task_id", "worker_id", "assignment_id", "condition_high", "condition_low"])
        for i, (row, high, low) in enumerate(answers):
            writer.writerow([row["task_id"], f"W{i}", f"A{i}", high, low])
    record = import_conditions(drafted, [results])
    triplets = pq.read_table(drafted / "conditions" / "conditions.parquet").to_pylist()
    found = [(t["task_id"], t["condition_type"], t["origin"], t["edit_distance"]) for t in triplets]
    edited = edit_distance(answers[1][2], hits[1]["draft_low"])
    assert found == [
        (hits[0]["task_id"], "high", "drafted_accepted", 0),
        (hits[0]["task_id"], "low", "drafted_accepted", 0),
        (hits[1]["task_id"], "high", "drafted_accepted", 0),
        (hits[1]["task_id"], "low", "drafted_edited", edited),
    ]
    assert edited == len(" and their ages") and record["counts"]["drafted_edited"] == 1
    assert record["counts"]["drafted_accepted"] == 3 and record["counts"]["written"] == 0
    plain = tmp_path / "plain"
    export(plain)
    record = import_conditions(plain, [EXAMPLE / "conditions_results.csv"])
    triplets = pq.read_table(plain / "conditions" / "conditions.parquet").to_pylist()
    assert {(t["origin"], t["edit_distance"]) for t in triplets} == {("written", None)}
    assert "written" not in record["counts"]  # no drafts offered: nothing to count


def test_origin_and_edit_distance() -> None:
    assert origin("The weather.", "") == ("written", None) and origin("x", None) == ("written", None)
    assert origin("The  weather. ", "The weather.") == ("drafted_accepted", 0)
    assert origin("The weathers.", "The weather.") == ("drafted_edited", 1)
    assert edit_distance("kitten", "sitting") == 3


@pytest.mark.slow
def test_check_conditions_lists_the_doubtful_for_a_verdict(drafted: Path, tmp_path: Path) -> None:
    source = tmp_path / "conditions.csv"
    rows = [
        ("A man rides a bike down a snowy street.", "A woman walks a dog down a snowy street.", "The weather."),
        ("A man rides a bike down a snowy street.", "A woman walks a dog down a snowy street.", "Sunny."),
        ("A red car parked on a street.", "A blue car driving on a road.", "The colour of the car."),
    ]
    with source.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["sentence1", "sentence2", "condition", "label"])
        writer.writerows([(*row, 3) for row in rows])
    out = tmp_path / "check"
    record = check_conditions(source, out, local_model())
    checked = pq.read_table(out / "checked.parquet").to_pylist()
    assert [r["condition"] for r in checked] == [r[2] for r in rows]
    doubtful = rows_of(out / "doubtful.csv")
    assert [int(r["row"]) for r in doubtful] == [r["row"] for r in checked if r["doubt"] is not None]
    assert all(r["verdict"] == "" for r in doubtful) and record["counts"]["doubtful"] == len(doubtful)
    for r in checked:
        assert (r["doubt"] is None) == (r["p_applies"] >= 0.5 and r["p_attribute"] >= 0.5)
    assert check_conditions(source, out, local_model())["status"] == "up-to-date"


@pytest.mark.slow
def test_a_worker_accepts_one_draft_and_edits_the_other_in_the_page(browser, drafted: Path, tmp_path: Path) -> None:
    """In a real browser: the page shows both drafts in its fields; the worker keeps the high one, edits the low
    one, submits; the import records one accepted and one edited draft with the edit's distance."""
    from tests.annotate.test_pages import Hit, batch_results

    folder = tmp_path / "annotate"
    shutil.copytree(drafted, folder)
    hits = rows_of(folder / "conditions_tasks" / "hits.csv")
    at = next(i for i, row in enumerate(hits) if row["draft_high"] and row["draft_low"])
    hit = Hit(browser, folder, "conditions", row=at)
    assert hit.page.input_value("#condition_high") == hit.row["draft_high"]
    assert hit.page.input_value("#condition_low") == hit.row["draft_low"]
    assert hit.page.locator("[data-drafted]").is_visible()
    edited = hit.row["draft_low"].rstrip(".") + " in winter."
    hit.page.fill("#condition_low", edited)
    answer = hit.submit_and_capture()
    assert (answer["condition_high"], answer["condition_low"]) == (hit.row["draft_high"], edited)
    results = batch_results(tmp_path / "batch.csv", [hit], [answer])
    hit.close()
    import_conditions(folder, [results])
    triplets = pq.read_table(folder / "conditions" / "conditions.parquet").to_pylist()
    assert [(t["condition_type"], t["origin"], t["edit_distance"]) for t in triplets] == [
        ("high", "drafted_accepted", 0),
        ("low", "drafted_edited", edit_distance(edited, hit.row["draft_low"])),
    ]
