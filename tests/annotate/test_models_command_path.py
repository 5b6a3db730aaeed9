"""Models in the loop through the command's path (issue 46): `annotate rate` against a real OpenAI-compatible
server on loopback that answers chosen distributions, then `annotate import --stage ratings --aggregate model`:
the import weighs each model answer by its distribution, not its most likely digit; `--budget` caps the human
ratings of all follow-ups together. The simulated crowds here go through the import's own function
(ratings.label_batch, testing.simulate_models.import_batch): a model that says 5 for every item is marked
unreliable and changes nothing, a model sure of 5 on one kind of condition leaves that kind's labels to the
people, and a model that flags everything moves no verdict."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import spearmanr

from csts_pipeline.report.annotations import _agreement
from csts_pipeline.stages.annotate.aggregation import model_workers, thresholds
from csts_pipeline.stages.annotate.crowd import hidden_gold
from csts_pipeline.stages.annotate.crowd.hidden_gold import GoldCheck
from csts_pipeline.stages.annotate.layout import model_dir
from csts_pipeline.stages.annotate.steps.model_ratings import answers_of
from csts_pipeline.stages.annotate.steps.ratings import label_batch
from csts_pipeline.stages.annotate.steps.summary import model_share_lines
from csts_pipeline.testing.openai_server import ChosenServer, start
from csts_pipeline.testing.simulate import gold_crowd, simulate_crowd
from csts_pipeline.testing.simulate_models import batch_tasks, condition_kind, import_batch, model_table, people_answers
from tests.annotate.test_annotate import cli, cli_error, kept, kept_dir, rated, read_tasks, write_results  # noqa: F401
from tests.annotate.test_quality import crowd_rows

SHARP = 0.92  # q on the most likely digit of the sure model
ITEM = re.compile(r"Sentence 1: (.*)\nSentence 2: (.*)\nCondition: (.*)\n")


def answers_for(tasks: list[dict], digit: dict[str, int], sharp: bool):
    """The server's answer to a chat: yes (0.9) to the pertinence question, and for the rating question a
    distribution whose most likely digit is the item's `digit`, sure (`sharp`) or spread over its neighbours."""
    by_text = {(t["sentence1"], t["sentence2"], t["condition"]): t["item_id"] for t in tasks}

    def answer(messages: list[dict[str, str]]) -> dict[str, float]:
        if "yes or no" in messages[0]["content"]:
            return {"yes": 0.9, "no": 0.1}
        found = ITEM.search(messages[-1]["content"])
        assert found is not None, messages[-1]["content"]
        d = digit[by_text[found.groups()]]
        if sharp:
            q = np.full(5, (1 - SHARP) / 4)
        else:  # the same most likely digit, with most of the mass on its neighbours and beyond
            q = np.full(5, 0.12)
            q[[max(d - 2, 0), min(d, 4)]] = 0.22
        q[d - 1] = 0.0
        q[d - 1] = max(q.max() + 0.02, SHARP if sharp else 0.0)
        return {str(k + 1): float(p) for k, p in enumerate(q / q.sum())}

    return answer


def rate_and_import(folder: Path, tasks: list[dict], digit: dict[str, int], sharp: bool, results: Path) -> dict:
    """`annotate rate` through the server, then the import with that model only (`--models`: the other one's
    answers stay in its own folder); the items table by item id."""
    name = "sharp" if sharp else "spread"
    server = ChosenServer(name, answers_for(tasks, digit, sharp))
    httpd = start(server)
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        cli("annotate", "rate", "--endpoint", url, "--batch-size", "4", "--out", folder)
    finally:
        httpd.shutdown()
    assert server.requests == 2 * len(tasks)
    cli("annotate", "import", "--stage", "ratings", "--out", folder, "--results", results, "--aggregate", "model",
        "--models", name)  # fmt: skip
    rows = pq.read_table(model_dir(folder, f"model:{name}") / "ratings.parquet").to_pylist()
    assert {r["item_id"]: r["rating"] for r in rows} == digit  # the same most likely digits either way
    return {r["item_id"]: r for r in pq.read_table(folder / "ratings" / "items.parquet").to_pylist()}


def test_the_import_weighs_a_models_distributions_not_its_most_likely_digits(tmp_path: Path, rated: Path):  # noqa: F811
    tasks = read_tasks(rated / "ratings_tasks")
    rows, truth, _ = crowd_rows(tasks, per_item=2)
    results = write_results(tmp_path / "people.csv", rows)
    digit = {item: int(value) for item, value in truth.items()}
    sure = rate_and_import(rated, tasks, digit, True, results)
    spread = rate_and_import(rated, tasks, digit, False, results)
    labelled = [i for i, r in sure.items() if r["label"] is not None]
    moved = np.array([abs(sure[i]["label"] - spread[i]["label"]) for i in labelled])
    assert moved.max() > 0.3 and np.mean(moved > 0.05) > 0.2, moved  # the labels follow the distributions

    def width(items: dict) -> float:
        return float(np.mean([items[i]["interval_high"] - items[i]["interval_low"] for i in labelled]))

    assert width(sure) < width(spread) - 0.1, (width(sure), width(spread))  # a sure answer narrows more
    ratings = pq.read_table(rated / "ratings" / "ratings.parquet").to_pylist()
    model = [r for r in ratings if r["worker_id"] == "model:spread"]
    assert len(model) == len(tasks) and all(r["distribution"] and r["p_not_pertinent"] == 0.1 for r in model)
    workers = {w["worker_id"]: w for w in pq.read_table(rated / "ratings" / "workers.parquet").to_pylist()}
    assert workers["model:spread"]["flag_skill"] is not None and workers["model:spread"]["kinds"]


def test_the_budget_caps_the_human_ratings_of_all_follow_ups(tmp_path: Path, rated: Path):  # noqa: F811
    tasks = read_tasks(rated / "ratings_tasks")
    rows, _, _ = crowd_rows(tasks, per_item=2)
    first = write_results(tmp_path / "first.csv", rows)
    cli("annotate", "import", "--stage", "ratings", "--out", rated, "--results", first, "--aggregate", "model")
    more = ("annotate", "export", "--stage", "ratings", "--more", "--out", rated)
    assert "(--budget 5: 5 spent)" in cli(*more, "--budget", "5")
    asked = _asked(rated)
    assert len(asked) == 5
    assert "(--budget 5: 5 spent)" in cli(*more, "--budget", "5", "--force")  # the same round again: not spent twice
    answers = [
        {"item_id": item, "worker_id": "LATE", "assignment_id": f"A-late-{n}", "rating": 3, "not_pertinent": "false"}
        for n, item in enumerate(asked)
    ]
    second = write_results(tmp_path / "more.csv", answers)
    cli("annotate", "import", "--stage", "ratings", "--out", rated, "--results", first, "--results", second,
        "--aggregate", "model")  # fmt: skip
    spent = cli_error(*more, "--budget", "5")
    assert "--budget 5 is spent: the follow-up batches so far asked 5 human ratings" in spent
    assert "(--budget 8: 8 spent)" in cli(*more, "--budget", "8")
    assert len(_asked(rated)) == 3


def _asked(folder: Path) -> list[str]:
    with (folder / "ratings_more" / "hits.csv").open(newline="") as handle:
        return [row["item_id"] for row in csv.DictReader(handle)]


def spearman(found, truth: np.ndarray) -> float:
    heard = ~np.isnan(found.labels.label)
    return float(spearmanr(found.labels.label[heard], truth[heard]).statistic)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_model_sure_of_one_answer_is_unreliable_and_replaces_nothing(seed: int):
    crowd = simulate_crowd(per_item=2, seed=seed)
    alone, both = import_batch(crowd, (), seed), import_batch(crowd, ("constant",), seed)
    assert abs(spearman(both, crowd.truth) - spearman(alone, crowd.truth)) <= 0.01
    workers = {w["worker_id"]: w for w in both.workers.to_pylist()}
    assert workers["model:constant"]["unreliable"] and workers["model:constant"]["reliability"] < 0.5
    share = both.agreement["model_workers"]["model_share"]
    assert share["replaced_ratings"] == 0
    assert (
        "no information (no agreement with people beyond chance): its answers were left out, it replaced no ratings"
        in "\n".join(model_share_lines(share))
    )
    # it flags every item (P 0.8): the verdict is the people's
    p_alone, p_both = alone.model.verdict.p_flag, both.model.verdict.p_flag
    assert abs(np.nanmean(p_both) - np.nanmean(p_alone)) <= 0.05 and workers["model:constant"]["flag_skill"] < 0.6


def test_a_model_that_flags_everything_moves_no_verdict_where_people_never_flag():
    crowd = simulate_crowd(per_item=2, seed=4)
    crowd.ratings.flagged[:] = False  # people who never flag
    crowd.ratings.rating[crowd.ratings.rating == 0] = 3
    found = import_batch(crowd, ("constant",), 4)
    assert np.nanmax(found.model.verdict.p_flag) < 0.05
    assert (found.labels.status != "not_pertinent").all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_model_sure_of_five_on_one_kind_leaves_that_kind_to_the_people(tmp_path: Path, seed: int):
    crowd = simulate_crowd(per_item=2, seed=seed)
    alone, both = import_batch(crowd, (), seed), import_batch(crowd, ("five_on_colour",), seed)
    colour = condition_kind(crowd.n_items, seed) & ~np.isnan(alone.labels.label)  # labelled: a person rated it

    def on_colour(found) -> tuple[float, float]:
        low, high = found.model.low, found.model.high
        covered = (low <= crowd.truth) & (crowd.truth <= high)
        return float(np.mean(found.labels.label[colour] - crowd.truth[colour])), float(covered[colour].mean())

    (error_alone, _), (error_both, covered) = on_colour(alone), on_colour(both)
    assert abs(error_both - error_alone) <= 0.1 and covered >= 0.85, (error_alone, error_both, covered)
    model = both.model.model_fits["model:five_on_colour"]
    assert model.weak_kinds == ["colour"] and not model.left_out
    assert spearman(both, crowd.truth) > spearman(alone, crowd.truth)  # it still helps elsewhere
    # the weak kind is shown in the summary and on the report page
    share = both.agreement["model_workers"]["model_share"]
    assert "weak on colour" in "\n".join(model_share_lines(share))
    (tmp_path / "agreement.json").write_text(__import__("json").dumps(both.agreement))
    assert "weak on colour" in dict(_agreement(tmp_path))["model:five_on_colour"]


def test_gold_scores_the_model_and_enters_its_confusion():
    made = gold_crowd(n_items=400, share=0.1, per_item=2, seed=6)
    crowd = made.crowd
    tasks = batch_tasks(crowd, 6)
    for task, answer in zip(tasks, made.gold_answer):
        task["gold_answer"] = answer
    people = people_answers(crowd)
    models = answers_of(model_table(crowd, tasks, "strong", 6), tasks, {}).ratings
    found = label_batch(tasks, people, models, "model", gold=GoldCheck.of(tasks, people))
    scored = [(m, made.gold_answer[m.item]) for m in models if made.gold_answer[m.item] is not None]
    right = sum(hidden_gold.right(answer, m) for m, answer in scored)
    workers = {w["worker_id"]: w for w in found.workers.to_pylist()}
    assert workers["model:strong"]["gold_answers"] == len(scored) > 20
    assert workers["model:strong"]["gold_accuracy"] == pytest.approx(right / len(scored), abs=1e-4)
    share = found.agreement["model_workers"]["model_share"]["models"][0]
    assert share["gold_answers"] == len(scored) and f"gold {right / len(scored):.3f} right" in model_workers.describe(
        share
    )
    # the numeric controls are in the model's fit (their known labels count its answers), not only in the score
    numeric = sum(1 for _, answer in scored if answer != "not_pertinent")
    real = sum(1 for t in tasks if t["gold_answer"] is None)
    assert share["answers"] == real + numeric


def never_flags_on(unscored_not_pertinent: bool) -> dict:
    """People who never flag a real item, a model that never flags (the strong model's ratings with P(not
    pertinent) 0.02 on every row), hidden controls among them; with `unscored_not_pertinent` the not-pertinent
    controls stay in the batch but carry no answer to score. The model's row of workers.parquet."""
    made = gold_crowd(n_items=400, share=0.1, per_item=2, seed=8)
    crowd = made.crowd
    tasks = batch_tasks(crowd, 8)
    for task, answer in zip(tasks, made.gold_answer):
        unscored = unscored_not_pertinent and answer == "not_pertinent"
        task["gold_answer"], task["control"] = (None if unscored else answer), answer is not None
    r = crowd.ratings
    real = np.array([answer is None for answer in made.gold_answer])[r.item]
    r.flagged[real] = False
    r.rating[real & (r.rating == 0)] = 3
    table = model_table(crowd, tasks, "strong", 8)
    table = table.set_column(table.schema.get_field_index("p_not_pertinent"), "p_not_pertinent",
                             pa.array([0.02] * table.num_rows, pa.float64()))  # fmt: skip
    models = answers_of(table, tasks, {}).ratings
    people = people_answers(crowd)
    found = label_batch(tasks, people, models, "model", gold=GoldCheck.of(tasks, people))
    return {w["worker_id"]: w for w in found.workers.to_pylist()}["model:strong"]


def test_not_pertinent_controls_score_a_model_that_never_flags():
    caught = never_flags_on(unscored_not_pertinent=False)
    assert caught["flag_skill"] < thresholds.FLAG_SKILL_BELOW and caught["unreliable"], caught
    # without the not-pertinent controls nothing shows it: people never flag, so every vote it gave looks right
    missed = never_flags_on(unscored_not_pertinent=True)
    assert missed["flag_skill"] > 0.8 and not missed["unreliable"], missed
