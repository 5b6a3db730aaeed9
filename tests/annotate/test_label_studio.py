"""Label Studio: the packaged configs and the export reader (unit tests), and the round trip against a real
server: for each stage (qualification, conditions, ratings, bws) the exported `label_studio/config.xml` becomes a
project, `tasks.json` its tasks, annotations are posted through the API (one of them cancelled), and the JSON
export goes through `annotate import`: the posted values land in the stage's Parquet (the qualification: in
workers.csv and answers.csv) and the cancelled annotation in report.csv. Drafted conditions (`annotate draft`, SmolLM2
from the wheel) reach the server as predictions of the two text areas; an annotation that keeps one draft and edits
the other, posted through the API and typed in Label Studio's own page, imports as drafted_accepted and
drafted_edited.

Label Studio lives in its own virtual environment (`make label-studio`: requirements/label-studio.txt, exact
versions with hashes), never in the project's lock; LABEL_STUDIO_VENV points elsewhere. A missing one fails the
round-trip tests, never skips them: CI creates it first. The server starts once for the module, on 127.0.0.1
with a fresh data folder, a test user and a legacy API token (off by default in Label Studio 1.23:
`--enable-legacy-api-token`), and with Label Studio's check of imported predictions against the config on."""

from __future__ import annotations

import csv
import html
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from csts_pipeline.cli import app
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.shards import shard_name, write_table
from csts_pipeline.stages.annotate.crowd import gold_set, guide, label_studio, pages, screening
from csts_pipeline.stages.annotate.crowd.kept import kept_source
from csts_pipeline.stages.annotate.crowd.results import parse_flag, parse_rating
from csts_pipeline.stages.annotate.steps.conditions import export_conditions, import_conditions
from csts_pipeline.stages.annotate.steps.drafts import edit_distance
from csts_pipeline.stages.annotate.steps.options import ConditionsExportOptions
from csts_pipeline.testing.smollm2 import gguf_file
from tests.annotate.test_annotate import kept_table

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "docs" / "images"
EXAMPLE_KEPT = REPO / "docs" / "examples" / "annotate" / "kept.csv"


def screenshot(page: Any, name: str) -> None:
    """The labeling page into docs/images/<name> when the picture is
    missing, or always with CSTS_UPDATE_SCREENSHOTS=1."""
    path = IMAGES / name
    if os.environ.get("CSTS_UPDATE_SCREENSHOTS") == "1" or not path.is_file():
        page.screenshot(path=str(path), full_page=True)


VENV = Path(os.environ.get("LABEL_STUDIO_VENV", REPO / ".venv-label-studio"))
TOKEN = "c5f0e1d2a3b4c5d6e7f8091a2b3c4d5e6f708192"
START_TIMEOUT_S = 420  # a fresh data folder runs all migrations first: about 100 s on two shared cores
REQUEST_TIMEOUT_S = 60
# Label Studio's own check of imported predictions against the project's config (off by default in 1.23): on, an
# import whose predictions name a control the config lacks, or hold a value of the wrong shape, is refused
PREDICTION_CHECK = "fflag_feat_utc_210_prediction_validation_15082025"


class LabelStudio:
    """The API of a running server, authenticated with the test user's legacy token."""

    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Token {TOKEN}", "Content-Type": "application/json"}
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{method} {path}: HTTP {exc.code}: {exc.read()[:1000]!r}") from None

    def user(self, email: str) -> int:
        return self.call("POST", "/api/users/", {"email": email, "username": email.split("@")[0]})["id"]

    def project(self, title: str, tasks_dir: Path) -> dict[str, int]:
        """A project from the stage's exported config and tasks; its Label Studio task ids by the stage's ids."""
        config = (tasks_dir / "label_studio" / "config.xml").read_text()
        project = self.call("POST", "/api/projects", {"title": title, "label_config": config})["id"]
        tasks = json.loads((tasks_dir / "label_studio" / "tasks.json").read_text())
        assert self.call("POST", f"/api/projects/{project}/import", tasks)["task_count"] == len(tasks)
        listed = self.call("GET", f"/api/tasks?project={project}&page_size=1000")["tasks"]
        id_field = next(iter(tasks[0]["data"]))
        self.project_id = project
        return {task["data"][id_field]: task["id"] for task in listed}

    def annotate(self, task: int, user: int, answers: dict[str, Any], cancelled: bool = False) -> None:
        """One annotation by `user`, with results shaped as the labeling page saves them."""
        result = [_result(name, value) for name, value in answers.items()]
        body = {"result": result, "completed_by": user, "was_cancelled": cancelled}
        self.call("POST", f"/api/tasks/{task}/annotations/", body)

    def export(self, path: Path) -> Path:
        path.write_text(json.dumps(self.call("GET", f"/api/projects/{self.project_id}/export?exportType=JSON")))
        return path


def _result(name: str, value: Any) -> dict[str, Any]:
    if isinstance(value, str) and name.startswith("condition"):
        return {"from_name": name, "to_name": "sentence1", "type": "textarea", "value": {"text": [value]}}
    return {"from_name": name, "to_name": "condition", "type": "choices", "value": {"choices": [str(value)]}}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_until_up(process: subprocess.Popen, url: str, log: Path) -> float:
    """Seconds until /health answers; fails with the log's tail when the server exits or takes too long."""
    started = time.monotonic()
    while time.monotonic() - started < START_TIMEOUT_S:
        if process.poll() is not None:
            pytest.fail(f"Label Studio exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as response:
                if response.status == 200:
                    return time.monotonic() - started
        except OSError:
            time.sleep(1)
    pytest.fail(f"Label Studio did not answer within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabelStudio]:
    executable = VENV / "bin" / "label-studio"
    if not executable.is_file():
        pytest.fail(f"{executable}: not found; `make label-studio` creates it (or set LABEL_STUDIO_VENV)")
    data = tmp_path_factory.mktemp("label-studio")
    port = _free_port()
    env = os.environ | {
        "LABEL_STUDIO_BASE_DATA_DIR": str(data),
        "LATEST_VERSION_CHECK": "false",
        "COLLECT_ANALYTICS": "false",
        PREDICTION_CHECK: "true",
    }
    command = [str(executable), "start", "--no-browser", "--internal-host", "127.0.0.1", "--port", str(port)]
    command += ["--data-dir", str(data), "--username", "lead@example.com", "--password", "test-password-1"]
    command += ["--user-token", TOKEN, "--enable-legacy-api-token"]
    log = data / "server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        seconds = _wait_until_up(process, url, log)
        print(f"Label Studio up in {seconds:.0f} s at {url}")
        yield LabelStudio(url)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


runner = CliRunner()


def cli(*args: str | Path) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def report(folder: Path) -> list[tuple[str, str]]:
    with (folder / "report.csv").open(newline="") as handle:
        return [(row["id"], row["problem"]) for row in csv.DictReader(handle)]


@pytest.fixture(scope="module")
def annotate_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("annotate")
    write_table(kept_table(n_images=40), root / "kept" / shard_name(0))
    return root


@pytest.mark.slow
def test_conditions_round_trip(server: LabelStudio, annotate_dir: Path):
    out, kept = annotate_dir / "annotate", annotate_dir / "kept"
    export_args = ("annotate", "export", "--stage", "conditions", "--out", out, "--input", kept, "--n", "8")
    assert "Label Studio" not in cli(*export_args)
    record = json.loads((out / "conditions_tasks" / "_stage.json").read_text())
    assert {"label_studio/config.xml", "label_studio/tasks.json"} <= set(record["output_files"])  # committed with it
    assert "label_studio/config.xml" in cli(*export_args, "--platform", "label-studio")  # up to date: says where
    tasks = server.project("conditions", out / "conditions_tasks")
    assert len(tasks) == 8
    writer = server.user("writer@example.com")
    ids = sorted(tasks)
    typed = {task: (f"The number of animals ({i}).", f"The colour of the sky ({i}).") for i, task in enumerate(ids)}
    for task in ids[:-1]:
        high, low = typed[task]
        server.annotate(tasks[task], writer, {"condition_high": high, "condition_low": low})
    server.annotate(tasks[ids[-1]], writer, {}, cancelled=True)

    export = server.export(annotate_dir / "conditions-export.json")
    cli("annotate", "import", "--stage", "conditions", "--out", out, "--results", export)
    rows = pq.read_table(out / "conditions" / "conditions.parquet").to_pylist()
    got = {(r["task_id"], r["condition_type"]): (r["condition"], r["worker_id"]) for r in rows}
    worker = f"ls-user-{writer}"
    expected = {(t, kind): (typed[t][k], worker) for t in ids[:-1] for k, kind in enumerate(("high", "low"))}
    assert got == expected
    assert report(out / "conditions") == [(ids[-1], "cancelled")]


@pytest.mark.slow
def test_ratings_round_trip(server: LabelStudio, annotate_dir: Path):
    out = annotate_dir / "annotate"
    cli("annotate", "export", "--stage", "ratings", "--out", out, "--platform", "label-studio")
    tasks = server.project("ratings", out / "ratings_tasks")
    assert len(tasks) == 14  # seven answered pairs x high/low
    raters = [server.user("rater1@example.com"), server.user("rater2@example.com")]
    ids = sorted(tasks)
    posted: dict[tuple[str, str], tuple[int | None, bool]] = {}
    for i, item in enumerate(ids):
        for r, rater in enumerate(raters):
            if r == 1 and i == 0:
                server.annotate(tasks[item], rater, {}, cancelled=True)
                continue
            flagged = r == 1 and i == 1
            answers = {"not_pertinent": "yes"} if flagged else {"rating": (i + 2 * r) % 5 + 1}
            server.annotate(tasks[item], rater, answers)
            posted[item, f"ls-user-{rater}"] = (None if flagged else answers["rating"], flagged)

    export = server.export(annotate_dir / "ratings-export.json")
    cli("annotate", "import", "--stage", "ratings", "--out", out, "--results", export)
    rows = pq.read_table(out / "ratings" / "ratings.parquet").to_pylist()
    assert {(r["item_id"], r["worker_id"]): (r["rating"], r["not_pertinent"]) for r in rows} == posted
    assert report(out / "ratings") == [(ids[0], "cancelled")]


@pytest.mark.slow
def test_bws_round_trip(server: LabelStudio, annotate_dir: Path):
    out = annotate_dir / "annotate"
    cli("annotate", "export", "--stage", "bws", "--out", out, "--appearances", "2", "--platform", "label-studio")
    tasks = server.project("bws", out / "bws_tasks")
    items = {t["tuple_id"]: t["item_ids"] for t in map(json.loads, (out / "bws_tasks" / "tasks.jsonl").open())}
    assert set(tasks) == set(items)
    rater = server.user("rater3@example.com")
    ids = sorted(tasks)
    posted = {}
    for i, tuple_id in enumerate(ids[:-1]):
        best, worst = i % 4 + 1, (i + 1) % 4 + 1
        server.annotate(tasks[tuple_id], rater, {"best": best, "worst": worst})
        posted[tuple_id] = (items[tuple_id][best - 1], items[tuple_id][worst - 1])
    server.annotate(tasks[ids[-1]], rater, {}, cancelled=True)

    export = server.export(annotate_dir / "bws-export.json")
    cli("annotate", "import", "--stage", "bws", "--out", out, "--results", export)
    rows = pq.read_table(out / "bws" / "annotations.parquet").to_pylist()
    assert {r["tuple_id"]: (r["best_item_id"], r["worst_item_id"]) for r in rows} == posted
    assert {r["worker_id"] for r in rows} == {f"ls-user-{rater}"}
    assert report(out / "bws") == [(ids[-1], "cancelled")]


@pytest.mark.slow
def test_qualification_round_trip(server: LabelStudio, tmp_path: Path):
    """The qualification test's one task answered by two annotators (one cancels): the import scores them from
    the export as it does from MTurk's batch results."""
    out = tmp_path / "annotate"  # its own folder: a workers.csv would filter the other stages' imports
    cli("annotate", "export", "--stage", "qualification", "--out", out, "--platform", "label-studio")
    tasks = server.project("qualification", out / "qualification_tasks")
    assert len(tasks) == 1
    (task,) = tasks.values()
    good, poor, quitter = (server.user(f"{who}@example.com") for who in ("good", "poor", "quitter"))
    gold = [5, 1, 5, 2, "np", 4]  # one point off on the fourth item: mean error 1/6
    written = {"condition_high_1": "The place.", "condition_low_1": "The time of day."}
    written |= {"condition_high_2": "The colour of the vehicle.", "condition_low_2": "The weather."}
    answers = {f"rating_{n}": a for n, a in enumerate(gold, start=1) if a != "np"} | {"not_pertinent_5": "yes"}
    server.annotate(task, good, written | answers)
    sloppy = {"condition_high_1": "The first sentence.", "condition_low_1": "The setting."}
    sloppy |= {"condition_high_2": "The vehicle.", "condition_low_2": "The vehicle."}
    server.annotate(task, poor, sloppy | {f"rating_{n}": 3 for n in range(1, 7)})
    server.annotate(task, quitter, {}, cancelled=True)

    export = server.export(tmp_path / "qualification-export.json")
    cli("annotate", "import", "--stage", "qualification", "--out", out, "--results", export)
    with (out / "qualification" / "workers.csv").open(newline="") as handle:
        workers = {row["worker_id"]: row for row in csv.DictReader(handle)}
    assert set(workers) == {f"ls-user-{good}", f"ls-user-{poor}"}
    scored = workers[f"ls-user-{good}"]
    assert (scored["qualified"], scored["conditions_passed"]) == ("true", "2")
    assert float(scored["rating_error"]) == pytest.approx(1 / 6, abs=1e-3)
    scored = workers[f"ls-user-{poor}"]
    assert (scored["qualified"], scored["conditions_passed"]) == ("false", "0")
    assert float(scored["rating_error"]) == pytest.approx(13 / 6, abs=1e-3)
    with (out / "qualification" / "answers.csv").open(newline="") as handle:
        typed = {(r["worker_id"], r["item_id"]): r for r in csv.DictReader(handle)}
    first = typed[f"ls-user-{good}", "q-w1"]
    assert (first["condition_high"], first["condition_low"]) == ("The place.", "The time of day.")
    assert [typed[f"ls-user-{good}", f"q-r{n}"]["rating"] or "np" for n in range(1, 7)] == list(map(str, gold))
    assert report(out / "qualification") == [(next(iter(tasks)), "cancelled")]


# ------------------------------------------------------------------------------------ configs and export reader

ANSWERS = {
    "conditions": set(screening.CONDITION_FIELDS[1:]),
    "ratings": {"rating", "not_pertinent"},
    "bws": {"best", "worst"},
}
LS_TAGS = {"View", "Header", "Collapse", "Panel", "Text", "HyperText", "Style", "TextArea", "Choices", "Choice"}


@pytest.mark.parametrize("stage", sorted(ANSWERS))
def test_config_names_every_answer_field(stage: str):
    """Each config parses, uses only Label Studio tags, names exactly the answer fields the import reads, links
    each control to a shown object, and offers choices the import accepts."""
    config = label_studio.config_text(stage)
    root = ElementTree.fromstring(config)
    assert {node.tag for node in root.iter()} <= LS_TAGS
    controls = label_studio.answer_fields(config)
    assert set(controls) == ANSWERS[stage]
    objects = {node.attrib["name"] for node in root.iter("Text")}
    assert all(node.attrib["toName"] in objects for node in root.iter() if node.tag in controls.values())
    shown = [node.attrib["value"] for node in root.iter("Header")]
    labels = {"sentence1": "Sentence 1", "sentence2": "Sentence 2", "condition": "Condition"}
    assert all(labels[node.attrib["name"].split("_")[0]] in shown for node in root.iter("Text"))  # all labelled
    choices = {node.attrib["name"]: [c.get("alias", c.get("value")) for c in node] for node in root.iter("Choices")}
    if stage == "ratings":
        assert [parse_rating(c) for c in choices["rating"]] == [1, 2, 3, 4, 5]
        rating = next(node for node in root.iter("Choices") if node.attrib["name"] == "rating")
        assert rating.attrib["required"] == "true" and rating.attrib["whenTagName"] == "not_pertinent"
        assert rating[0].attrib["value"] == "1 · completely different"  # anchored, as on the page
        assert [parse_flag(c) for c in choices["not_pertinent"]] == [True]
    if stage == "bws":
        assert (
            [screening.parse_position(c) for c in choices["best"]]
            == [0, 1, 2, 3]
            == [screening.parse_position(c) for c in choices["worst"]]
        )
    # Label Studio's page reads a choice's "true"/"false" as a boolean and then draws nothing at all
    assert not {c for values in choices.values() for c in values} & {"true", "false"}
    hotkeys = [node.attrib["hotkey"] for node in root.iter("Choice") if "hotkey" in node.attrib]
    assert len(hotkeys) == len(set(hotkeys))
    assert root.find("Collapse/Panel/HyperText") is not None  # the guidelines, their tables as HTML tables


def test_qualification_config_names_every_answer_field_the_import_reads(tmp_path: Path):
    """The exported qualification config has one block per gold item: the import's numbered answer fields
    (`qualification._score`) and nothing else, shows only the one hits.csv row's columns, and offers choices the
    scoring accepts."""
    cli("annotate", "export", "--stage", "qualification", "--out", tmp_path, "--platform", "label-studio")
    folder = tmp_path / "qualification_tasks"
    config = (folder / "label_studio" / "config.xml").read_text()
    root = ElementTree.fromstring(config)
    assert {node.tag for node in root.iter()} <= LS_TAGS
    items = gold_set.read_gold(gold_set.default_gold())
    writes = sum(item["kind"] == "write" for item in items)
    rates = len(items) - writes
    expected = {f"condition_{kind}_{n}" for kind in ("high", "low") for n in range(1, writes + 1)}
    expected |= {f"{name}_{n}" for name in ("rating", "not_pertinent") for n in range(1, rates + 1)}
    controls = label_studio.answer_fields(config)
    assert set(controls) == expected
    with (folder / "hits.csv").open(newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    assert label_studio.data_fields(config) == set(row) - {"test_id"}
    objects = {node.attrib["name"] for node in root.iter("Text")}
    assert all(node.attrib["toName"] in objects for node in root.iter() if node.tag in controls.values())
    for node in root.iter("Choices"):
        values = [c.get("alias", c.get("value")) for c in node]
        parse = parse_rating if node.attrib["name"].startswith("rating") else parse_flag
        assert [parse(v) for v in values] == ([1, 2, 3, 4, 5] if parse is parse_rating else [True])
    tasks = json.loads((folder / "label_studio" / "tasks.json").read_text())
    assert [task["data"] for task in tasks] == [row]


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", html.unescape(text).casefold())


@pytest.mark.parametrize("stage", pages.STAGES)
def test_the_page_and_the_config_carry_the_same_guidelines(stage: str):
    """One source: the HIT page's guidelines (its `<dialog class="guide">` sections, heading and body) are, in
    order, the config's guideline panels (heading, and the HTML of their HyperText), tables included."""
    repeats = {"write": 2, "rate": 3}
    page = pages.render(stage, repeats)
    guides = [pages.guide_parts(guide) for guide in re.findall(r'<dialog class="guide".*?</dialog>', page, re.S)]
    assert guides
    in_page = [(_words(heading), " ".join(body.split())) for _, heading, body in guides]
    root = ElementTree.fromstring(label_studio.config_text(stage, repeats))
    in_config = [
        (_words(panel.attrib["value"].replace("(click to open)", "")), panel.find("HyperText").attrib["value"])
        for panel in root.iter("Panel")
    ]
    assert [(heading, f'<div class="csts-guide">{body}</div>') for heading, body in in_page] == in_config
    assert len(_words(re.sub(r"<[^>]+>", " ", in_page[0][1]))) > 40  # the text itself, not just a heading
    assert all("<table>" in body for _, body in in_page)


@pytest.fixture
def conditions_dir(tmp_path: Path) -> Path:
    """An annotate folder with 6 exported condition tasks and their Label Studio files."""
    write_table(kept_table(n_images=30), tmp_path / "kept" / shard_name(0))
    folder = tmp_path / "annotate"
    export_conditions(folder, kept_source(None, tmp_path / "kept"), ConditionsExportOptions(n=6))
    label_studio.write_project(folder / "conditions_tasks", "conditions")
    return folder


def test_tasks_json_holds_the_hits_columns(conditions_dir: Path):
    tasks_dir = conditions_dir / "conditions_tasks"
    with (tasks_dir / "hits.csv").open(newline="") as handle:
        hits = list(csv.DictReader(handle))
    tasks = json.loads((tasks_dir / "label_studio" / "tasks.json").read_text())
    assert [task["data"] for task in tasks] == hits
    assert label_studio.data_fields(label_studio.config_text("conditions")) <= set(hits[0])
    assert (tasks_dir / "label_studio" / "config.xml").read_text() == label_studio.config_text("conditions")
    (tasks_dir / "hits.csv").write_text("task_id,sentence1\nc-1,A dog.\n")
    with pytest.raises(UserError, match=r"hits.csv: no column\(s\) sentence2"):
        label_studio.write_project(tasks_dir, "conditions")


def _annotation(number: int, user: int, answers: dict[str, str], cancelled: bool = False) -> dict[str, Any]:
    """An annotation as Label Studio 1.23's JSON export writes it (the fields the reader uses, and a few more)."""
    result = [_result(name, value) for name, value in answers.items()]
    return {"id": number, "completed_by": user, "result": result, "was_cancelled": cancelled, "lead_time": 3.5}


def test_export_reader_reports_cancelled_missing_and_unknown(conditions_dir: Path, tmp_path: Path):
    tasks = [json.loads(line) for line in (conditions_dir / "conditions_tasks" / "tasks.jsonl").open()]
    ids = [task["task_id"] for task in tasks]
    both = {"condition_high": "The type of animal.", "condition_low": "The number of people."}
    export = [
        {"id": 1, "data": {"task_id": ids[0]}, "annotations": [_annotation(11, 2, both)]},
        {"id": 2, "data": {"task_id": ids[1]}, "annotations": [_annotation(12, 2, {}, cancelled=True)]},
        {"id": 3, "data": {"task_id": ids[2]}, "annotations": [_annotation(13, 3, {"condition_high": "The sky."})]},
        {"id": 4, "data": {"task_id": "c-ffffffffffffffff"}, "annotations": [_annotation(14, 3, both)]},
        {"id": 5, "data": {"sentence1": "no id"}, "annotations": [_annotation(15, 3, both)]},
        {"id": 6, "data": {"task_id": ids[3]}, "annotations": []},
    ]
    path = tmp_path / "project-1-at-2026.json"
    path.write_text(json.dumps(export))
    record = import_conditions(conditions_dir, [path])
    assert record["counts"]["accepted"] == 1 and record["counts"]["excluded_rows"] == 4
    assert report(conditions_dir / "conditions") == [
        (ids[1], "cancelled"),
        (ids[2], "empty_condition_low"),
        ("c-ffffffffffffffff", "unknown_id"),
        ("", "missing_id"),
    ]
    with (conditions_dir / "conditions" / "report.csv").open(newline="") as handle:
        cancelled = next(csv.DictReader(handle))
    assert cancelled["row"] == "2" and "annotation ls-12 by ls-user-2" in cancelled["detail"]
    rows = pq.read_table(conditions_dir / "conditions" / "conditions.parquet").to_pylist()
    assert [(r["condition"], r["worker_id"], r["assignment_id"]) for r in rows] == [
        ("The type of animal.", "ls-user-2", "ls-11"),
        ("The number of people.", "ls-user-2", "ls-11"),
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not a readable JSON file"),
        ('{"data": {}}', "not a Label Studio JSON export"),
        ('[{"annotations": []}]', "not a Label Studio JSON export"),
        ('[{"data": {"item_id": "r-1"}, "annotations": []}]', "missing field\\(s\\) task_id"),
        ('[{"id": 7, "data": {"task_id": "c-1"}, "annotations": [3]}]', "task 7: an annotation that is not"),
    ],
)
def test_a_bad_export_is_one_line_error(conditions_dir: Path, tmp_path: Path, content: str, message: str):
    path = tmp_path / "export.json"
    path.write_text(content)
    with pytest.raises(UserError, match=message) as caught:
        import_conditions(conditions_dir, [path])
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_cli_platform_is_checked_before_anything_is_written(conditions_dir: Path, tmp_path: Path):
    export = ["annotate", "export", "--stage", "ratings", "--out", str(conditions_dir)]
    result = runner.invoke(app, [*export, "--platform", "xml"])
    assert result.exit_code == 2 and result.output.strip() == "error: --platform 'xml': expected mturk or label-studio"
    result = runner.invoke(app, [*export, "--format", "label-studio"])  # the old spelling names the new flag
    assert result.exit_code == 2
    assert result.output.strip() == "error: --format label-studio: annotate export takes --platform label-studio"
    assert not (conditions_dir / "ratings_tasks").exists()
    qualification = ["annotate", "export", "--stage", "qualification", "--out", str(tmp_path), "--platform", "mturk"]
    result = runner.invoke(app, qualification)  # every platform's files are written, MTurk's named
    assert result.exit_code == 0 and "  MTurk: " in result.output, result.output
    assert f"{tmp_path / 'qualification_tasks' / 'template.html'} (the HIT page)" in result.output
    assert (tmp_path / "qualification_tasks" / "label_studio" / "tasks.json").is_file()


@contextmanager
def labeling_page(browser: Any, server: LabelStudio) -> Iterator[Any]:
    """A page of the session's Chromium (conftest `browser`), logged in to Label Studio as the test user (whose
    annotations are `ls-user-1`), in a context of its own."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.goto(server.url + "/user/login/")
        page.fill('input[name="email"]', "lead@example.com")
        page.fill('input[name="password"]', "test-password-1")
        page.click('button[type="submit"]')
        page.wait_for_load_state("networkidle")
        yield page
    finally:
        context.close()


def open_task(page: Any, server: LabelStudio, task: int, shown: str) -> None:
    """The labeling page of one task, once the config has drawn the text `shown`."""
    page.goto(f"{server.url}/projects/{server.project_id}/data?task={task}")
    page.get_by_text(shown, exact=True).wait_for()


def submit(page: Any) -> None:
    page.get_by_role("button", name="Submit").click()
    page.get_by_text("Annotation saved successfully", exact=True).wait_for(timeout=30_000)


@pytest.mark.slow
def test_conditions_typed_in_the_labeling_page(browser: Any, server: LabelStudio, tmp_path: Path):
    """The config as a worker sees it in Label Studio's own page in Chromium: the guidelines open, the two
    conditions are typed and submitted, and the export imports to exactly the typed text."""
    write_table(kept_table(n_images=20), tmp_path / "kept" / shard_name(0))
    out = tmp_path / "annotate"
    export_args = ("--out", out, "--input", tmp_path / "kept", "--n", "3", "--platform", "label-studio")
    cli("annotate", "export", "--stage", "conditions", *export_args)
    tasks = server.project("conditions in the browser", out / "conditions_tasks")
    task_id = sorted(tasks)[0]
    typed = ("The kind of scene, typed.", "The objects in view, typed.")
    with labeling_page(browser, server) as page:
        open_task(page, server, tasks[task_id], "Sentence 1")
        page.get_by_text("How to write conditions (click to open)").click()
        page.get_by_text("Name the attribute, not its value", exact=False).wait_for(timeout=10_000)
        rule = page.get_by_role("rowheader", name="Name the attribute, not its value")  # a real table row
        assert rule.count() == 1 and rule.evaluate("th => th.closest('table') !== null")
        screenshot(page, "label_studio_conditions.png")
        shown = (guide.example("placeholders.condition_high"), guide.example("placeholders.condition_low"))
        for placeholder, text in zip(shown, typed):
            page.get_by_placeholder(placeholder).fill(text)
            page.get_by_placeholder(placeholder).press("Enter")
        submit(page)
    export = server.export(tmp_path / "browser-export.json")
    cli("annotate", "import", "--stage", "conditions", "--out", out, "--results", export)
    rows = pq.read_table(out / "conditions" / "conditions.parquet").to_pylist()
    assert [(r["task_id"], r["condition"], r["worker_id"]) for r in rows] == [
        (task_id, typed[0], "ls-user-1"),
        (task_id, typed[1], "ls-user-1"),
    ]


@pytest.mark.slow
def test_ratings_and_bws_by_keyboard_in_the_labeling_page(browser: Any, server: LabelStudio, tmp_path: Path):
    """The configs' keys in Label Studio's page: 4 rates 4, n ticks not pertinent; 2 picks item 2 as best and e
    item 3 as worst; the exports import to exactly those answers."""
    write_table(kept_table(n_images=20), tmp_path / "kept" / shard_name(0))
    out = tmp_path / "annotate"
    cli("annotate", "export", "--stage", "conditions", "--out", out, "--input", tmp_path / "kept", "--n", "3")
    written = tmp_path / "conditions.jsonl"
    with written.open("w") as handle:
        for task in map(json.loads, (out / "conditions_tasks" / "tasks.jsonl").open()):
            answer = {"condition_high": "The animal.", "condition_low": "The colour.", "worker_id": "W1"}
            handle.write(json.dumps({"task_id": task["task_id"], **answer}) + "\n")
    cli("annotate", "import", "--stage", "conditions", "--out", out, "--results", written)
    cli("annotate", "export", "--stage", "ratings", "--out", out, "--platform", "label-studio")
    cli("annotate", "export", "--stage", "bws", "--out", out, "--appearances", "2", "--platform", "label-studio")
    with labeling_page(browser, server) as page:
        ratings = server.project("ratings by keyboard", out / "ratings_tasks")
        items = sorted(ratings)[:2]
        for item, key in zip(items, ("4", "n")):
            open_task(page, server, ratings[item], "Sentence 1")
            page.get_by_role("heading", name="Condition", exact=True).click()  # the page, not a field, has the focus
            if key == "4":
                screenshot(page, "label_studio_ratings.png")
                page.get_by_role("button", name="Submit").click()  # neither rated nor flagged: refused
                page.get_by_text("Choose a rating from 1 to 5, or tick Not pertinent").wait_for(timeout=10_000)
                page.keyboard.press("Escape")
                page.get_by_role("heading", name="Condition", exact=True).click()
            page.keyboard.press(key)
            submit(page)
        ratings_export = server.export(tmp_path / "ratings-export.json")
        tuples = server.project("bws by keyboard", out / "bws_tasks")
        tuple_id = sorted(tuples)[0]
        open_task(page, server, tuples[tuple_id], "Pair 1")
        page.get_by_text("Pair 1", exact=True).first.click()
        page.keyboard.press("2")
        page.keyboard.press("e")
        screenshot(page, "label_studio_bws.png")
        submit(page)
        bws_export = server.export(tmp_path / "bws-export.json")

    cli("annotate", "import", "--stage", "ratings", "--out", out, "--results", ratings_export)
    rows = pq.read_table(out / "ratings" / "ratings.parquet").to_pylist()
    assert sorted((r["item_id"], r["worker_id"], r["rating"], r["not_pertinent"]) for r in rows) == [
        (items[0], "ls-user-1", 4, False),
        (items[1], "ls-user-1", None, True),
    ]
    cli("annotate", "import", "--stage", "bws", "--out", out, "--results", bws_export)
    item_ids = next(
        t["item_ids"] for t in map(json.loads, (out / "bws_tasks" / "tasks.jsonl").open()) if t["tuple_id"] == tuple_id
    )
    rows = pq.read_table(out / "bws" / "annotations.parquet").to_pylist()
    assert [(r["tuple_id"], r["best_item_id"], r["worst_item_id"]) for r in rows] == [
        (tuple_id, item_ids[1], item_ids[2])
    ]


# ----------------------------------------------------------------------------- drafted conditions as predictions


@pytest.fixture(scope="module")
def drafted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 condition-writing tasks of the documented sample drafted through `annotate draft` by SmolLM2 from the
    wheel (every draft that passes the page's checks kept: --min-applies 0, as in test_drafts.py), then exported
    again for Label Studio with the drafts."""
    out = tmp_path_factory.mktemp("drafted") / "annotate"
    export_args = ("annotate", "export", "--stage", "conditions", "--out", out, "--input", EXAMPLE_KEPT, "--n", "4")
    cli(*export_args)
    cli(
        "annotate",
        "draft",
        "--stage",
        "conditions",
        "--out",
        out,
        "--model",
        gguf_file(),
        "--device",
        "cpu",
        "--min-applies",
        "0",
    )
    cli(*export_args, "--platform", "label-studio")
    return out


def drafted_project(server: LabelStudio, drafted: Path, folder: Path, title: str) -> tuple[dict[str, str], int]:
    """A copy of the drafted export in `folder`, its project on the server, and the first task offering both
    drafts: (its hits.csv row, its Label Studio id)."""
    shutil.copytree(drafted, folder)
    tasks = server.project(title, folder / "conditions_tasks")
    with (folder / "conditions_tasks" / "hits.csv").open(newline="", encoding="utf-8") as handle:
        row = next(row for row in csv.DictReader(handle) if row["draft_high"] and row["draft_low"])
    return row, tasks[row["task_id"]]


def imported_origins(folder: Path, export: Path) -> list[tuple[str, str, str, str, int | None]]:
    """`annotate import --stage conditions` of a Label Studio export: (task, type, condition, origin, edit
    distance) per condition."""
    cli("annotate", "import", "--stage", "conditions", "--out", folder, "--results", export)
    rows = pq.read_table(folder / "conditions" / "conditions.parquet").to_pylist()
    return [(r["task_id"], r["condition_type"], r["condition"], r["origin"], r["edit_distance"]) for r in rows]


@pytest.mark.slow
def test_drafts_reach_the_server_as_predictions_and_import_as_accepted_and_edited(
    server: LabelStudio, drafted: Path, tmp_path: Path
):
    """The imported tasks hold the drafts as predictions of the two text areas (checked against the config by the
    server itself: PREDICTION_CHECK); an annotation starts from the server's prediction, as the labeling page's
    does, keeps the high draft and edits the low one; the server's export imports as drafted_accepted and
    drafted_edited with the edit distance."""
    out = tmp_path / "annotate"
    row, task = drafted_project(server, drafted, out, "drafted conditions")
    (prediction,) = server.call("GET", f"/api/predictions/?task={task}")
    assert prediction["model_version"] == label_studio.DRAFTS_VERSION
    result = {r["from_name"]: r for r in prediction["result"]}
    assert {name: (r["type"], r["value"]["text"]) for name, r in result.items()} == {
        "condition_high": ("textarea", [row["draft_high"]]),
        "condition_low": ("textarea", [row["draft_low"]]),
    }
    edited = row["draft_low"].rstrip(".") + " on the beach."
    result["condition_low"]["value"]["text"] = [edited]
    writer = server.user("drafts@example.com")
    body = {"result": list(result.values()), "completed_by": writer, "parent_prediction": prediction["id"]}
    server.call("POST", f"/api/tasks/{task}/annotations/", body)

    export = server.export(tmp_path / "drafted-export.json")
    distance = edit_distance(edited, row["draft_low"])
    assert distance == len(" on the beach") + (not row["draft_low"].endswith("."))
    assert imported_origins(out, export) == [
        (row["task_id"], "high", row["draft_high"], "drafted_accepted", 0),
        (row["task_id"], "low", edited, "drafted_edited", distance),
    ]
    record = json.loads((out / "conditions" / "_stage.json").read_text())
    assert [record["counts"][name] for name in ("drafted_accepted", "drafted_edited", "written")] == [1, 1, 0]


@pytest.mark.slow
def test_a_draft_kept_and_one_edited_in_the_labeling_page(
    browser: Any, server: LabelStudio, drafted: Path, tmp_path: Path
):
    """Label Studio's own page in Chromium opens the task with both drafts already in its text areas; the
    annotator edits the low one, keeps the high one and submits; the export imports as one draft accepted and one
    edited."""
    out = tmp_path / "annotate"
    row, task = drafted_project(server, drafted, out, "drafted conditions in the browser")
    edited = row["draft_low"].rstrip(".") + " on the beach."
    with labeling_page(browser, server) as page:
        open_task(page, server, task, row["draft_high"])  # shown before anything is typed
        page.get_by_text(row["draft_low"], exact=True).wait_for()
        page.wait_for_load_state("networkidle")  # the page's loading veil gone, for the picture
        screenshot(page, "label_studio_drafts.png")
        low = page.get_by_test_id("textarea-region").filter(has_text=row["draft_low"])
        low.get_by_test_id("htx-textbox-edit-button").click()  # the region's pencil: its text becomes an input
        editing = page.get_by_test_id("htx-textbox-edit").filter(has=page.locator('input[name^="condition_low:"]'))
        editing.get_by_test_id("htx-textbox-input").fill(edited)
        editing.get_by_test_id("htx-textbox-save").click()
        page.get_by_text(edited, exact=True).wait_for()
        submit(page)
    export = server.export(tmp_path / "browser-drafted-export.json")
    assert imported_origins(out, export) == [
        (row["task_id"], "high", row["draft_high"], "drafted_accepted", 0),
        (row["task_id"], "low", edited, "drafted_edited", edit_distance(edited, row["draft_low"])),
    ]
