"""What the expert file may hold and what the ratings import does with each (issue 61): a JSON array of objects
read as rows and anything else refused; decimal labels published as given; duplicates that agree taken once and
ones that disagree refused, in one file or across several `--expert`; a C-STS row labelling every item of its
text; items no person rated keeping the expert's label; rows that are all rejections said to be rejections; and a
sample too small to measure the people named as what it is. Every refusal is one line, exit status 2, with the
previous import's files byte-identical."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from csts_pipeline.stages.annotate.aggregation import trust
from csts_pipeline.stages.annotate.steps.summary import model_share_lines
from csts_pipeline.testing.chosen_model import rate_with
from csts_pipeline.testing.command_path import People, prepare_folder, task_ids, write_results
from csts_pipeline.testing.simulate_models import kernel
from tests.annotate.test_annotate import cli, cli_error
from tests.annotate.test_bad_inputs_annotate import snapshot

PAIRS = 60
IMPORT = ("annotate", "import", "--stage", "ratings", "--aggregate", "model", "--force")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """PAIRS pairs, the last the first's text again (two items per text there), a good model, one person an item
    on every item but the first five, and a first import (the outputs a refusal must leave as they are)."""
    pairs = [(f"A dog runs in field {i}.", f"A cat sits on mat {i}.") for i in range(PAIRS - 1)]
    folder = tmp_path_factory.mktemp("expert") / "annotate"
    items = prepare_folder([*pairs, pairs[0]], folder)
    rng = np.random.default_rng(0)
    truth = {item: float(rng.integers(1, 6)) for item in items}
    rate_with(folder, "good", {i: (kernel(np.array([truth[i]]), 0.6)[0], 0.05) for i in items})
    people = People.around(truth, seed=0, spam=0.0, lenient=0.0, harsh=0.0)
    ids = task_ids(folder / "ratings_tasks")
    answered = ids[5:]
    names = list(people.kind)
    rows = people.answer(answered, [names[n % len(names)] for n in range(len(answered))], rng)
    write_results(folder.parent / "people.csv", rows)
    (folder.parent / "truth.json").write_text(json.dumps(truth))
    cli(*IMPORT, "--out", folder, "--results", folder.parent / "people.csv")
    return folder


def copy_built(built: Path, tmp_path: Path) -> Path:
    """A copy of a module's built annotate folder, with the people's answers and the truth beside it."""
    for name in ("people.csv", "truth.json"):
        shutil.copy(built.parent / name, tmp_path / name)
    return Path(shutil.copytree(built, tmp_path / "annotate"))


@pytest.fixture
def folder(built: Path, tmp_path: Path) -> Path:
    return copy_built(built, tmp_path)


def run(folder: Path, *expert: Path) -> str:
    given = [a for path in expert for a in ("--expert", path)]
    return cli(*IMPORT, "--out", folder, "--results", folder.parent / "people.csv", *given)


def refused(folder: Path, *expert: Path) -> str:
    """The one line a refused import prints, the previous import's files left byte-identical."""
    before = snapshot(folder)
    given = [a for path in expert for a in ("--expert", path)]
    line = cli_error(*IMPORT, "--out", folder, "--results", folder.parent / "people.csv", *given)
    assert snapshot(folder) == before
    return line


def items(folder: Path) -> dict[str, dict]:
    return {r["item_id"]: r for r in pq.read_table(folder / "ratings" / "items.parquet").to_pylist()}


def expert_summary(folder: Path) -> dict:
    return json.loads((folder / "ratings" / "agreement.json").read_text())["expert"]


def sample(folder: Path, n: int = 40) -> dict[str, float]:
    """The truth of n rated items (the sixth on: the first five have no person's answer)."""
    truth = json.loads((folder.parent / "truth.json").read_text())
    return {i: truth[i] for i in task_ids(folder / "ratings_tasks")[5 : 5 + n]}


def write_csv(path: Path, rows: dict[str, float] | list[tuple[str, float]]) -> Path:
    pairs = rows.items() if isinstance(rows, dict) else rows
    path.write_text("item_id,label\n" + "".join(f"{i},{v:g}\n" for i, v in pairs))
    return path


def test_a_json_array_of_objects_is_read_as_rows(folder: Path, tmp_path: Path):
    labels = sample(folder)
    path = tmp_path / "labels.json"
    path.write_text(json.dumps([{"item_id": i, "label": v} for i, v in labels.items()], indent=2))
    run(folder, path)
    assert expert_summary(folder)["items"] == 40
    one_line = tmp_path / "one-line.json"
    one_line.write_text(json.dumps([{"item_id": i, "label": v} for i, v in labels.items()]))
    run(folder, one_line)
    assert expert_summary(folder)["items"] == 40


@pytest.mark.parametrize(
    ("text", "words"),
    [("3\n4\n", "row 1 is a number, not an object"), ("[[1, 2], [3, 4]]", "row 1 is an array, not an object"),
     ('{"item_id": "x", "label": 3}\n"four"\n', "row 2 is a string, not an object")],
)  # fmt: skip
def test_json_rows_that_are_not_objects_are_one_line_naming_the_file(folder: Path, tmp_path: Path, text, words):
    path = tmp_path / "labels.jsonl"
    path.write_text(text)
    line = refused(folder, path)
    assert line.startswith(f"error: {path}: {words}"), line


def test_decimal_labels_are_published_as_the_expert_gave_them(folder: Path, tmp_path: Path):
    labels = sample(folder)
    ids = list(labels)
    labels[ids[0]], labels[ids[1]], labels[ids[2]] = 3.7, 2.5, 1.2
    run(folder, write_csv(tmp_path / "decimal.csv", labels))
    found = items(folder)
    assert [found[i]["label"] for i in ids[:3]] == [3.7, 2.5, 1.2]
    assert all(found[i]["label"] == labels[i] for i in ids)


def test_the_experts_decimals_set_the_scales_level_not_their_rounding(folder: Path, tmp_path: Path):
    """The fit reads 3.4 as a 3, but the scale's level is set from the labels as given: the other items' labels
    move by the sample's mean rounding residual, and by nothing else."""
    labels = sample(folder)
    run(folder, write_csv(tmp_path / "whole.csv", labels))
    whole = items(folder)
    residual = {i: (0.4 if v < 5 else -0.4) for i, v in labels.items()}
    run(folder, write_csv(tmp_path / "decimal.csv", {i: v + residual[i] for i, v in labels.items()}))
    decimal = items(folder)
    others = [i for i in whole if i not in labels and whole[i]["status"] == "kept" and 1.5 < whole[i]["label"] < 4.5]
    moved = np.array([decimal[i]["label"] - whole[i]["label"] for i in others])
    assert len(others) > 10 and moved == pytest.approx(np.mean(list(residual.values())), abs=1e-6)


def test_identical_duplicates_pass_and_conflicting_ones_are_refused(folder: Path, tmp_path: Path):
    labels = sample(folder)
    first = next(iter(labels))
    run(folder, write_csv(tmp_path / "twice.csv", [*labels.items(), (first, labels[first])]))
    assert expert_summary(folder)["items"] == 40
    other = 1.0 if labels[first] != 1 else 5.0
    path = write_csv(tmp_path / "conflict.csv", [*labels.items(), (first, other)])
    line = refused(folder, path)
    assert line == (
        f"error: {path}: row 41: item {first} labelled {other:g}, but {labels[first]:g} at row 1; give each item "
        "one label"
    )


def test_a_text_row_labels_every_item_of_that_text(folder: Path, tmp_path: Path):
    """The first pair's text is the last pair's too: a C-STS row of it labels both items."""
    tasks = [json.loads(line) for line in (folder / "ratings_tasks" / "tasks.jsonl").open()]
    text = ("sentence1", "sentence2", "condition")
    twins = [t for t in tasks if t["sentence1"] == "A dog runs in field 0." and t["condition_type"] == "high"]
    assert len(twins) == 2
    path = tmp_path / "csts.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*text, "label"])
        writer.writerow([*(twins[0][k] for k in text), 4.5])
        writer.writerows([*(t[k] for k in text), v] for t in tasks[20:40] for v in [sample(folder, 200)[t["item_id"]]]
                         if t["sentence1"] != "A dog runs in field 0.")  # fmt: skip
    run(folder, path)
    found = items(folder)
    assert [found[t["item_id"]]["label"] for t in twins] == [4.5, 4.5]


def test_several_expert_files_are_all_read_and_their_conflicts_refused(folder: Path, tmp_path: Path):
    labels = sample(folder)
    ids = list(labels)
    a = write_csv(tmp_path / "a.csv", {i: labels[i] for i in ids[:20]})
    b = write_csv(tmp_path / "b.csv", {i: labels[i] for i in ids[15:]})
    run(folder, a, b)
    summary = expert_summary(folder)
    assert summary["items"] == 40 and summary["files"] == [str(a), str(b)]
    other = 1.0 if labels[ids[15]] != 1 else 5.0
    c = write_csv(tmp_path / "c.csv", [(ids[15], other)])
    line = refused(folder, a, c)
    assert line == (
        f"error: {c}: row 1: item {ids[15]} labelled {other:g}, but {labels[ids[15]]:g} at {a} row 16; give each "
        "item one label"
    )


def test_sample_items_nobody_rated_keep_the_experts_label_and_are_counted(folder: Path, tmp_path: Path):
    truth = json.loads((folder.parent / "truth.json").read_text())
    unrated = task_ids(folder / "ratings_tasks")[:5]
    labels = {i: truth[i] for i in unrated} | sample(folder)
    run(folder, write_csv(tmp_path / "expert.csv", labels))
    found = items(folder)
    assert [found[i]["label"] for i in unrated] == [truth[i] for i in unrated]
    assert all(found[i]["status"] == "kept" and found[i]["ratings"] == 0 for i in unrated)
    summary = expert_summary(folder)
    assert summary["items"] == 45 and summary["items_unanswered"] == 5


def test_a_file_of_only_rejections_says_they_are_rejections(folder: Path, tmp_path: Path):
    path = write_csv(tmp_path / "rejected.csv", {i: -1 for i in sample(folder, 3)})
    line = refused(folder, path)
    assert line == (
        f"error: {path}: no item gets a label: the 3 row(s) that match an item are rejections (label -1, a "
        "condition the expert rejected), and rejections are left out"
    )


def test_a_sample_too_small_to_measure_the_people_is_named_with_the_threshold(folder: Path, tmp_path: Path):
    said = run(folder, write_csv(tmp_path / "small.csv", sample(folder, 19)))
    short = "an expert sample of 19 rated items (19 ratings), fewer than the 20 ratings on items of known label"
    assert f"weights assumed: too little in the batch measures the people ({short}" in said
    assert "no expert sample" not in said
    assert "90% intervals: each item's own posterior mass (19 rated items of known label, fewer than the 20" in said
    people = [r for r in pq.read_table(folder / "ratings" / "workers.parquet").to_pylist()
              if not r["worker_id"].startswith("model:")]  # fmt: skip
    assert people and not any("no expert sample" in r["evidence"] for r in people)
    counted = {trust.EXPERT: 19, trust.GOLD: 0, trust.REPEATS: 0, trust.TEST: 0}  # no model: nothing pins them
    alone = trust.TrustPlan({}, {"W1": counted}, False, short=trust.shortfall(counted, 19))
    assert (
        trust.person_words(alone, "W1")
        == f"assumed: too little in the batch measures the people ({short} that measure the people)"
    )


def test_the_summary_counts_replaced_ratings_whole_and_says_the_people_are_judged_pooled(folder: Path, tmp_path: Path):
    """40 sample items, one person an item: the people are measured pooled on the items of known label, one
    figure that judges them all; what the model replaced is a count of ratings, printed whole."""
    said = run(folder, write_csv(tmp_path / "expert.csv", sample(folder)))
    assert "so it judges every person alike" in said and "measured pooled on the items of known label" in said
    (line,) = [line for line in said.splitlines() if line.startswith("human ratings bought:")]
    assert line.endswith(" of them") and "." not in line.split("replaced")[1], line
    share = {"human_ratings": 5, "replaced_ratings": 0.0, "models": [{"worker_id": "model:m", "answers": 3,
             "reliability": 0.5, "replaced_ratings": 0.0, "kinds": []}]}  # fmt: skip
    assert model_share_lines(share)[0] == "human ratings bought: 5; the models' answers replaced 0 of them"
    assert model_share_lines(share)[1].endswith("; worth 0 human ratings")
