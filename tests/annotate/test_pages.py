"""The HIT pages in a real browser (Playwright driving Chromium): for every stage, the exported template.html
filled with the first row of hits.csv as MTurk fills it, worked as a worker would (typing, clicking, keys),
submitted to `<turkSubmitTo>/mturk/externalSubmit` (intercepted), the posted form turned into an MTurk
batch-results CSV and imported by `csts-pipeline annotate import`: the typed values must come out. Bad input is
refused in the page and nothing is posted; preview mode cannot submit.

The set-up also draws the pages into docs/images/annotate_*.png (each stage at 1280x800 and on a 390x844 phone,
the guide as it opens on a first visit, a refused answer) when a picture is missing, or always with
CSTS_UPDATE_SCREENSHOTS=1 (so a test run does not dirty the tree). A missing Chromium fails the module: CI
installs it (`make browser`)."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from csts_pipeline.cli import app
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.shards import write_table
from csts_pipeline.stages.annotate.crowd import gold_set, pages
from tests.annotate.test_annotate import kept_table
from tests.conftest import REPO

EXAMPLE = REPO / "docs" / "examples" / "annotate"
IMAGES = REPO / "docs" / "images"
PAGE_URL = "http://127.0.0.1:9/hit/template.html"  # never reached: the test answers it (port 9 is discard)
SUBMIT_TO = "http://127.0.0.1:9/turk"
runner = CliRunner()


def cli(*args: str | Path) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def export_all(folder: Path) -> Path:
    """An annotate folder with every stage's tasks: the qualification test, the worked example's conditions
    (imported from its results, so ratings and BWS can be exported) and the ratings and BWS tasks."""
    cli("annotate", "export", "--stage", "qualification", "--out", folder)
    cli("annotate", "export", "--stage", "conditions", "--input", EXAMPLE / "kept.csv", "--n", 8, "--out", folder)
    cli("annotate", "import", "--stage", "conditions", "--results", EXAMPLE / "conditions_results.csv", "--out", folder)
    more = folder.parent / "kept.parquet"  # COCO caption pairs outside the 8, for the hidden controls to be made from
    write_table(kept_table(), more)
    cli("annotate", "export", "--stage", "ratings", "--out", folder, "--gold-share", "0.1", "--input", more)
    cli("annotate", "export", "--stage", "bws", "--out", folder)
    return folder


@pytest.fixture(scope="module")
def annotated(tmp_path_factory: pytest.TempPathFactory, browser) -> Path:
    """Every stage exported once; the screenshots for docs/annotate.md drawn from it."""
    folder = export_all(tmp_path_factory.mktemp("pages") / "annotate")
    if os.environ.get("CSTS_UPDATE_SCREENSHOTS") == "1" or not all(path.is_file() for path in SCREENSHOTS):
        draw_screenshots(browser, folder)
    return folder


DESKTOP, PHONE = (1280, 800), (390, 844)
SCREENSHOTS = [
    *(IMAGES / f"annotate_{stage}.png" for stage in pages.STAGES),
    *(IMAGES / f"annotate_{stage}_phone.png" for stage in ("conditions", "ratings", "bws")),
    IMAGES / "annotate_guide.png",
    IMAGES / "annotate_conditions_checks.png",
]


def draw_screenshots(browser, folder: Path) -> None:
    """Each page as a returning worker sees it (the guide seen once: the task first) on a desktop screen, whole,
    and on a phone, its first screen; the guide as a first visit opens it; a refused answer."""
    for stage in pages.STAGES:
        hit = Hit(browser, folder, stage, viewport=DESKTOP)
        hit.page.screenshot(path=str(IMAGES / f"annotate_{stage}.png"), full_page=True)
        hit.close()
        if stage != "qualification":
            hit = Hit(browser, folder, stage, viewport=PHONE)
            hit.page.screenshot(path=str(IMAGES / f"annotate_{stage}_phone.png"))
            hit.close()
    hit = Hit(browser, folder, "conditions", viewport=DESKTOP, guide_seen=False)
    hit.page.screenshot(path=str(IMAGES / "annotate_guide.png"))
    hit.close()
    hit = Hit(browser, folder, "conditions", viewport=DESKTOP)  # the page refusing a bad answer
    hit.page.fill("#condition_high", "What the first sentence says about the bus")
    hit.page.fill("#condition_low", "")
    hit.submit()
    top, bottom = hit.page.locator("[data-check]").bounding_box(), hit.page.locator(".actions").bounding_box()
    scrolled = hit.page.evaluate("window.scrollY")  # boxes are in the viewport, a full-page clip is not
    clip = {"x": top["x"] - 12, "y": top["y"] + scrolled - 12, "width": top["width"] + 24}
    clip["height"] = bottom["y"] + scrolled + bottom["height"] + 12 - clip["y"]
    hit.page.screenshot(path=str(IMAGES / "annotate_conditions_checks.png"), clip=clip, full_page=True)
    hit.close()


class Hit:
    """One stage's page as a worker sees it in an assignment: a hits.csv row (the first, or `row`) filled in,
    served at PAGE_URL with MTurk's query parameters; every post to the submit URL is kept in `posted`."""

    def __init__(
        self,
        browser,
        folder: Path,
        stage: str,
        assignment: str = "ASG-1",
        worker: str = "W-1",
        wrap: bool = False,
        row: int = 0,
        guide_seen: bool = True,
        viewport: tuple[int, int] = (1000, 900),
    ):
        with (folder / f"{stage}_tasks" / "hits.csv").open(newline="", encoding="utf-8") as handle:
            self.row = list(csv.DictReader(handle))[row]
        body = pages.fill((folder / f"{stage}_tasks" / pages.PAGE).read_text(encoding="utf-8"), self.row)
        if wrap:
            body = wrapped(body, assignment)
        self.assignment, self.worker, self.posted, self.names = assignment, worker, [], []
        self.context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        if guide_seen:  # a worker back for another HIT: the guide was read (and closed) once before
            self.context.add_init_script(seen_script(body))
        self.page = self.context.new_page()
        self.page.set_default_timeout(5000)  # a page that navigated away fails fast
        self.page.route(
            re.compile(re.escape(PAGE_URL) + r"\?.*"),
            lambda route: route.fulfill(body=body, content_type="text/html; charset=utf-8"),
        )
        self.page.route(f"{SUBMIT_TO}/mturk/externalSubmit", self._capture)
        query = urlencode({"assignmentId": assignment, "hitId": "HIT-1", "workerId": worker, "turkSubmitTo": SUBMIT_TO})
        self.page.goto(f"{PAGE_URL}?{query}")

    def _capture(self, route) -> None:
        assert route.request.method == "POST"
        fields = parse_qsl(route.request.post_data or "", keep_blank_values=True)
        self.posted.append(dict(fields))
        self.names.append([name for name, _ in fields])
        route.fulfill(body="<p>submitted</p>", content_type="text/html")

    def submit(self) -> None:
        self.page.click("#hit-submit")

    def submit_and_capture(self) -> dict[str, str]:
        with self.page.expect_request(f"{SUBMIT_TO}/mturk/externalSubmit"):
            self.submit()
        self.page.wait_for_load_state()
        assert len(self.posted) == 1, self.posted
        assert len(self.names[0]) == len(set(self.names[0])), f"a field posted twice: {self.names[0]}"
        return self.posted[0]

    def refused(self) -> None:
        """Submit with bad input: the page stays, says why, and posts nothing."""
        self.submit()
        assert self.page.inner_text("#status").startswith("Please fix")
        assert self.posted == []

    def error(self, key: str, nth: int = 0) -> str:
        return self.page.locator(f"[data-error='{key}']").nth(nth).inner_text()

    def close(self) -> None:
        self.context.close()


def seen_script(page: str) -> str:
    """A script marking every guide of `page` as seen in localStorage, as the page itself does on closing one."""
    version = re.search(r'data-guide-version="(\w+)"', page).group(1)
    keys = [f"csts-guide:{ident}:{version}" for ident in re.findall(r'<dialog class="guide" id="([\w-]+)"', page)]
    assert keys, "no guide in the page"
    return "".join(f"localStorage.setItem({json.dumps(key)}, '1');" for key in keys)


def wrapped(page: str, assignment: str) -> str:
    """The page as a requester site may show a layout: inside the site's own form, with its own assignmentId
    field and Submit button, in place of the page's form (which a parser would drop inside another anyway)."""
    head, body = re.sub(r"<form id=\"hit-form\"[^>]*>|</form>", "", page).split("<body>")
    return (
        f'{head}<body><form id="site-form" method="post" action="{SUBMIT_TO}/mturk/externalSubmit">'
        f'<input type="hidden" name="assignmentId" value="{assignment}">'
        + body.replace("</body>", '<p><input type="submit" id="submitButton" value="Submit"></p></form></body>')
    )


def batch_results(path: Path, hits: list[Hit], answers: list[dict[str, str]]) -> Path:
    """An MTurk batch-results CSV: one row per submitted assignment, `Input.` the hits.csv row, `Answer.` the
    posted fields (MTurk drops assignmentId from the answers)."""
    fields = list(dict.fromkeys(name for answer in answers for name in answer if name != "assignmentId"))
    inputs = list(hits[0].row)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["HITId", "AssignmentId", "WorkerId", "AssignmentStatus"]
            + [f"Input.{name}" for name in inputs]
            + [f"Answer.{name}" for name in fields]
        )
        for hit, answer in zip(hits, answers, strict=True):
            assert answer["assignmentId"] == hit.assignment
            writer.writerow(
                ["HIT-1", hit.assignment, hit.worker, "Submitted"]
                + [hit.row[name] for name in inputs]
                + [answer.get(name, "") for name in fields]
            )
    return path


# ------------------------------------------------------------------------------------------------ the templates


def test_every_page_is_self_contained_and_shows_exactly_the_hits_columns(annotated: Path):
    for stage in pages.STAGES:
        page = (annotated / f"{stage}_tasks" / pages.PAGE).read_text()
        with (annotated / f"{stage}_tasks" / "hits.csv").open(newline="") as handle:
            columns = next(csv.reader(handle))
        assert sorted(pages.placeholders(page)) == sorted(columns), stage
        assert "<!--#" not in page and "__N__" not in page, stage
        assert not re.search(r"""(src|href)\s*=|<link|@import|url\(""", page), stage
    script = pages.render("conditions")
    assert f"var MAX_CONDITION_CHARS = {gold_set.MAX_CONDITION_CHARS};" in script


def test_a_page_whose_placeholders_differ_from_hits_csv_is_refused(tmp_path: Path):
    with pytest.raises(UserError, match=r"placeholders \['sentence2'\] not in hits.csv"):
        pages.write_page(tmp_path, "conditions", ["task_id", "sentence1"])
    assert not (tmp_path / pages.PAGE).exists()
    filled = pages.fill("<p>${sentence1}</p>", {"sentence1": 'A <b>bold</b> "cat"'})
    assert filled == "<p>A &lt;b&gt;bold&lt;/b&gt; &quot;cat&quot;</p>"


@pytest.mark.parametrize("stage", pages.STAGES)
def test_preview_shows_the_task_but_cannot_submit(browser, annotated: Path, stage: str):
    hit = Hit(browser, annotated, stage, assignment="ASSIGNMENT_ID_NOT_AVAILABLE")
    assert hit.page.is_disabled("#hit-submit")
    assert hit.page.is_visible("#preview")
    sentence = list(hit.row.values())[1]  # the first sentence shown, whatever the stage calls it
    assert sentence in hit.page.inner_text("main")
    hit.page.locator("form").evaluate("form => form.requestSubmit()")
    hit.page.wait_for_timeout(200)
    assert hit.posted == []
    hit.close()


# ---------------------------------------------------------------------------------------------------- the stages


def test_conditions_page_round_trip(browser, tmp_path: Path):
    folder = tmp_path / "annotate"
    cli("annotate", "export", "--stage", "conditions", "--input", EXAMPLE / "kept.csv", "--n", 8, "--out", folder)
    hit = Hit(browser, folder, "conditions")
    assert hit.page.inner_text("[data-sentence] >> nth=0") == hit.row["sentence1"]
    hit.refused()
    assert hit.error("condition_high") == "Write a condition." and hit.error("condition_low") == "Write a condition."
    hit.page.fill("#condition_high", "What the first sentence says")
    hit.page.fill("#condition_low", "  what THE first sentence says ")
    hit.refused()
    assert "sentence" in hit.error("condition_high")
    hit.page.fill("#condition_high", "The colour of the bus.")
    for same in ("the colour of the  bus.", " THE colour of the bus! ", "The colour-of the bus"):
        hit.page.fill("#condition_low", same)  # case, punctuation and spaces do not make a condition different
        hit.refused()
        assert hit.error("condition_high") == ""
        assert hit.error("condition_low") == "The two conditions must be different.", same
        assert hit.page.evaluate("document.activeElement.id") == "condition_low"  # focus on the field in error
    hit.page.fill("#condition_low", "x" * 81)
    hit.refused()
    assert hit.error("condition_low").startswith("Keep it to 80 characters")
    hit.page.fill("#condition_low", hit.row["sentence2"])
    hit.refused()
    assert hit.error("condition_low").startswith("Do not copy a sentence")
    hit.page.fill("#condition_low", "The time of  day.")
    answer = hit.submit_and_capture()
    assert answer == {
        "condition_high": "The colour of the bus.",
        "condition_low": "The time of  day.",
        "task_id": hit.row["task_id"],
        "assignmentId": "ASG-1",
    }
    results = batch_results(tmp_path / "batch.csv", [hit], [answer])
    hit.close()
    assert "1 of 8 tasks answered" in cli(
        "annotate", "import", "--stage", "conditions", "--results", results, "--out", folder
    )
    rows = pq.read_table(folder / "conditions" / "conditions.parquet").to_pylist()
    assert [(r["task_id"], r["condition_type"], r["condition"], r["worker_id"]) for r in rows] == [
        (hit.row["task_id"], "high", "The colour of the bus.", "W-1"),
        (hit.row["task_id"], "low", "The time of day.", "W-1"),  # whitespace runs collapsed by the import
    ]


def test_ratings_page_round_trip_with_the_keyboard(browser, annotated: Path, tmp_path: Path):
    first = Hit(browser, annotated, "ratings", assignment="ASG-R1", worker="RATER-1")
    first.refused()
    assert first.error("rating").startswith("Choose a rating from 1 to 5")
    first.page.keyboard.press("2")
    first.page.keyboard.press("4")
    assert first.page.is_checked("input[name=rating][value='4']")
    rated = first.submit_and_capture()
    assert rated == {"rating": "4", "item_id": first.row["item_id"], "assignmentId": "ASG-R1"}

    second = Hit(browser, annotated, "ratings", assignment="ASG-R2", worker="RATER-2")
    second.page.keyboard.press("5")
    second.page.keyboard.press("n")  # not pertinent, decided: the rating is set aside and cannot be chosen
    assert second.page.is_checked("input[name=not_pertinent]")
    assert not second.page.is_checked("input[name=rating][value='5']")
    assert second.page.is_disabled("input[name=rating][value='3']")
    second.page.keyboard.press("3")
    flagged = second.submit_and_capture()
    assert flagged == {"not_pertinent": "true", "item_id": second.row["item_id"], "assignmentId": "ASG-R2"}

    results = batch_results(tmp_path / "ratings.csv", [first, second], [rated, flagged])
    first.close()
    second.close()
    cli("annotate", "import", "--stage", "ratings", "--results", results, "--out", annotated)
    rows = pq.read_table(annotated / "ratings" / "ratings.parquet").to_pylist()
    assert [(r["item_id"], r["worker_id"], r["assignment_id"], r["rating"], r["not_pertinent"]) for r in rows] == [
        (first.row["item_id"], "RATER-1", "ASG-R1", 4, False),
        (first.row["item_id"], "RATER-2", "ASG-R2", None, True),
    ]


def page_shape(hit: Hit) -> dict:
    """What a worker could tell a page by, its row's own text aside: the fields, the visible text with the row's
    values blanked out, and the ids and names the form posts."""
    text = hit.page.inner_text("body")
    for name in ("sentence1", "sentence2", "condition"):
        text = text.replace(hit.row[name], f"<{name}>")
    fields = hit.page.eval_on_selector_all(
        "input, button, textarea, select", "els => els.map(e => [e.tagName, e.type, e.name, e.id, e.disabled])"
    )
    return {"text": text, "fields": fields}


def test_a_hidden_gold_row_looks_like_any_other(browser, annotated: Path, tmp_path: Path):
    tasks = [json.loads(line) for line in (annotated / "ratings_tasks" / "tasks.jsonl").read_text().splitlines()]
    gold_at = next(i for i, t in enumerate(tasks) if t.get("gold_answer") is not None)
    real_at = next(i for i, t in enumerate(tasks) if t.get("gold_answer") is None)
    hits = [
        Hit(browser, annotated, "ratings", assignment=f"ASG-G{i}", worker="RATER-G", row=i) for i in (gold_at, real_at)
    ]
    gold, real = hits
    assert set(gold.row) == set(real.row) and gold.row["item_id"] == tasks[gold_at]["item_id"]
    assert page_shape(gold) == page_shape(real)
    shown = gold.page.inner_text("body").casefold()  # and no word of the row gives it away
    assert not re.search(r"\b(gold|control|check|test|qualification|attention)\b", shown.replace("checkbox", ""))
    posted = []
    for hit in hits:
        hit.page.keyboard.press("4")
        posted.append(hit.submit_and_capture())
    assert [sorted(p) for p in posted] == [sorted(posted[1])] * 2
    results = batch_results(tmp_path / "gold.csv", hits, posted)
    for hit in hits:
        hit.close()
    cli("annotate", "import", "--stage", "ratings", "--results", results, "--out", annotated)
    # the control's answer is scored, never kept as a rating
    rows = pq.read_table(annotated / "ratings" / "ratings.parquet").to_pylist()
    assert [r["item_id"] for r in rows] == [real.row["item_id"]]
    agreement = json.loads((annotated / "ratings" / "agreement.json").read_text())
    assert agreement["gold"]["answers"] == 1


def test_bws_page_round_trip_with_the_keyboard(browser, annotated: Path, tmp_path: Path):
    hit = Hit(browser, annotated, "bws", assignment="ASG-B1", worker="BWS-1")
    for n in range(1, 5):  # each pair a card: its sentences and condition, each labelled
        card = hit.page.locator(".card").nth(n - 1)
        lines = card.locator(".line").all_inner_texts()
        assert lines == [
            f"SENTENCE 1 {hit.row[f'sentence1_{n}']}",
            f"SENTENCE 2 {hit.row[f'sentence2_{n}']}",
            f"CONDITION {hit.row[f'condition_{n}']}",
        ]
    hit.refused()
    assert hit.error("best") == "Choose the most similar pair."
    hit.page.keyboard.press("2")  # best: the second pair
    hit.page.keyboard.press("w")  # worst: the second pair too
    hit.refused()
    assert hit.error("best") == "The most and the least similar must be different pairs."
    hit.page.keyboard.press("r")  # worst: the fourth pair
    answer = hit.submit_and_capture()
    assert answer == {"best": "2", "worst": "4", "tuple_id": hit.row["tuple_id"], "assignmentId": "ASG-B1"}
    results = batch_results(tmp_path / "bws.csv", [hit], [answer])
    hit.close()
    cli("annotate", "import", "--stage", "bws", "--results", results, "--out", annotated)
    (chosen,) = pq.read_table(annotated / "bws" / "annotations.parquet").to_pylist()
    tuple_record = next(
        json.loads(line)
        for line in (annotated / "bws_tasks" / "tasks.jsonl").read_text().splitlines()
        if json.loads(line)["tuple_id"] == hit.row["tuple_id"]
    )
    assert (chosen["worker_id"], chosen["best_item_id"], chosen["worst_item_id"]) == (
        "BWS-1",
        tuple_record["item_ids"][1],
        tuple_record["item_ids"][3],
    )


def take_the_test(hit: Hit, conditions: list[tuple[str, str]], answers: list[str]) -> dict[str, str]:
    """Fill the qualification page: conditions per write item, then a rating or `np` per rate item."""
    for n, (high, low) in enumerate(conditions, start=1):
        hit.page.fill(f"#condition_high_{n}", high)
        hit.page.fill(f"#condition_low_{n}", low)
    for n, answer in enumerate(answers, start=1):
        if answer == "np":
            hit.page.check(f"input[name=not_pertinent_{n}]")
        else:
            hit.page.click(f"input[name=rating_{n}][value='{answer}'] >> xpath=..")
    return hit.submit_and_capture()


def test_qualification_page_round_trip_scores_workers(browser, annotated: Path, tmp_path: Path):
    annotated = shutil.copytree(annotated, tmp_path / "annotate")  # its workers.csv would filter the other tests
    good = Hit(browser, annotated, "qualification", assignment="ASG-Q1", worker="GOOD")
    good.refused()
    assert good.error("condition_high", 1) == "Write a condition."
    assert good.error("rating", 5).startswith("Choose a rating")
    gold = ["5", "1", "5", "2", "np", "4"]  # one point off on the fourth item: mean error 1/6
    written = [("The place.", "The time of day."), ("The colour of the vehicle.", "The weather.")]
    good_answer = take_the_test(good, written, gold)
    assert good_answer["condition_low_2"] == "The weather." and good_answer["not_pertinent_5"] == "true"
    assert "rating_5" not in good_answer and good_answer["test_id"] == good.row["test_id"]

    poor = Hit(browser, annotated, "qualification", assignment="ASG-Q2", worker="POOR")
    poor_answer = take_the_test(poor, [("The setting.", "The people."), ("The vehicle.", "The weather.")], ["3"] * 6)
    results = batch_results(tmp_path / "qualification.csv", [good, poor], [good_answer, poor_answer])
    good.close()
    poor.close()
    cli("annotate", "import", "--stage", "qualification", "--results", results, "--out", annotated)
    with (annotated / "qualification" / "workers.csv").open(newline="") as handle:
        workers = {row["worker_id"]: row for row in csv.DictReader(handle)}
    assert workers["GOOD"]["qualified"] == "true" and float(workers["GOOD"]["rating_error"]) == pytest.approx(
        1 / 6, abs=1e-3
    )
    assert workers["POOR"]["qualified"] == "false" and float(workers["POOR"]["rating_error"]) == pytest.approx(
        13 / 6, abs=1e-3
    )
    assert workers["POOR"]["conditions_passed"] == "2"
    with (annotated / "qualification" / "answers.csv").open(newline="") as handle:
        typed = {(r["worker_id"], r["item_id"]): r for r in csv.DictReader(handle)}
    assert (typed["GOOD", "q-w2"]["condition_high"], typed["GOOD", "q-w2"]["condition_low"]) == written[1]
    assert [typed["GOOD", f"q-r{n}"]["rating"] or "np" for n in range(1, 7)] == gold
    assert typed["GOOD", "q-r5"]["not_pertinent"] == "true" and typed["POOR", "q-r5"]["rating"] == "3"
    grant = (annotated / "qualification" / "mturk_workers.csv").read_text().splitlines()
    assert grant == ['"Worker ID","UPDATE-C-STS annotator"', '"GOOD",1', '"POOR",0']


def test_inside_a_requester_site_form_the_page_still_checks_before_posting(browser, annotated: Path):
    hit = Hit(browser, annotated, "ratings", assignment="ASG-W", wrap=True)
    assert hit.page.evaluate("document.querySelectorAll('form').length") == 1
    hit.page.click("#submitButton")  # the site's own button is checked as well
    assert hit.posted == [] and hit.error("rating").startswith("Choose a rating")
    hit.page.keyboard.press("5")
    answer = hit.submit_and_capture()
    assert answer == {"assignmentId": "ASG-W", "rating": "5", "item_id": hit.row["item_id"]}
    hit.close()
