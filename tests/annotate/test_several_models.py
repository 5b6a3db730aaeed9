"""Several models at once (steps.model_folders): the packaged MiniLM (a similarity model)
and a language model on a loopback OpenAI-compatible server rate one batch of STS Benchmark pairs, each in its own
folder; the ratings import weighs both or those `--models` names; each link of conditions -> ratings export ->
each model's answers -> import -> split, publish and report is checked for staleness; the tables, the summary,
the report and the dataset card name each model's kind and how its answers were read."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from csts_pipeline.report.annotations import _agreement
from csts_pipeline.stages.annotate.crowd.files import read_jsonl
from csts_pipeline.stages.annotate.layout import MODEL_RATINGS, model_dir
from csts_pipeline.stages.annotate.steps.model_folders import model_runs
from csts_pipeline.testing.command_path import People, first_batch
from csts_pipeline.testing.openai_server import ChosenServer, start
from tests.annotate.test_annotate import cli, cli_error
from tests.annotate.test_models_command_path import answers_for
from tests.annotate.test_similarity_rater import MINILM, folder_of, stsb_pairs

pytestmark = pytest.mark.slow  # MiniLM on the CPU, and several imports
SIM, LM = "model:all-MiniLM-L6-v2", "model:judge"
IMPORT = ("annotate", "import", "--stage", "ratings", "--aggregate", "model")


def rate_lm(folder: Path, sharp: bool = False) -> str:
    """`annotate rate` with the language model `judge` on a new loopback server (a new endpoint: a new identity),
    answering each item's rounded truth (truth.json), sure or spread; the command's output."""
    tasks = read_jsonl(folder / "ratings_tasks" / "tasks.jsonl")
    truth = json.loads((folder.parent / "truth.json").read_text())
    digit = {t["item_id"]: int(np.clip(np.rint(truth[t["item_id"]]), 1, 5)) for t in tasks}
    httpd = start(ChosenServer("judge", answers_for(tasks, digit, sharp)))
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        return cli("annotate", "rate", "--endpoint", url, "--batch-size", "4", "--out", folder)
    finally:
        httpd.shutdown()


@pytest.fixture(scope="module")
def rated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 STS-B pairs (80 items) rated by MiniLM and by the language model, and a people's results file beside."""
    folder = tmp_path_factory.mktemp("several") / "annotate"
    truth = folder_of(stsb_pairs("sts-test.csv")[:40], folder)
    (folder.parent / "truth.json").write_text(json.dumps(truth))
    cli("annotate", "rate", "--out", folder, "--similarity-model", MINILM, "--device", "cpu")
    rate_lm(folder)
    first_batch(folder, People.around(truth, seed=4, ambiguity=0.3), 2, folder.parent / "people.csv", 4)
    return folder


@pytest.fixture
def folder(rated: Path, tmp_path: Path) -> Path:
    """A fresh copy of the rated batch, its people's results and truth beside it."""
    for name in ("people.csv", "truth.json", "conditions.csv"):
        shutil.copy(rated.parent / name, tmp_path / name)
    return Path(shutil.copytree(rated, tmp_path / "annotate"))


def labels_with(folder: Path, *models: str) -> dict[str, float]:
    """The import's labels by item id, weighing the named models (none named: every model)."""
    chosen = ("--models", ",".join(models)) if models else ()
    cli(*IMPORT, "--out", folder, "--results", folder.parent / "people.csv", *chosen, "--force")
    items = pq.read_table(folder / "ratings" / "items.parquet").to_pylist()
    return {r["item_id"]: r["label"] for r in items if r["label"] is not None}


def moved(a: dict[str, float], b: dict[str, float]) -> float:
    return max(abs(a[i] - b[i]) for i in a)


def test_each_model_keeps_its_own_folder_and_a_rerun_leaves_the_other(folder: Path):
    runs = {run.worker: run for run in model_runs(folder)}
    assert sorted(runs) == [SIM, LM]
    assert runs[SIM].folder == model_dir(folder, SIM) and runs[LM].folder == model_dir(folder, LM)
    assert (runs[SIM].kind, runs[LM].kind) == ("similarity model", "language model")
    kept = {name: (runs[SIM].folder / name).read_bytes() for name in ("_stage.json", "ratings.parquet")}
    before = runs[LM].record["fingerprint"]
    assert "80 of 80 items rated by model:judge" in rate_lm(folder, sharp=True)
    again = {run.worker: run for run in model_runs(folder)}
    assert again[LM].record["fingerprint"] != before  # the language model's answers replaced ...
    assert {name: (again[SIM].folder / name).read_bytes() for name in kept} == kept  # ... MiniLM's left in place


def test_the_import_weighs_every_model_or_those_named_and_each_moves_the_labels(folder: Path):
    both = labels_with(folder)
    workers = {w["worker_id"]: w for w in pq.read_table(folder / "ratings" / "workers.parquet").to_pylist()}
    assert workers[SIM]["model_kind"] == "similarity model" and workers[LM]["model_kind"] == "language model"
    reading = workers[SIM]["model_reading"]
    assert reading.startswith("its answers are its similarity scores, read as the normal score of their rank")
    assert "through a normal density per true label" in reading and "bin edges" in reading
    assert all(w["model_kind"] is None for name, w in workers.items() if not name.startswith("model:"))
    record = json.loads((folder / "ratings" / "_stage.json").read_text())
    keys = {key for key in record["inputs"] if key.startswith(f"{MODEL_RATINGS}/")}
    assert keys == {f"{MODEL_RATINGS}/{model_dir(folder, w).name}" for w in (SIM, LM)}
    assert labels_with(folder, "model:judge", "all-MiniLM-L6-v2") == both  # both named: the same import
    only_lm, only_sim = labels_with(folder, "judge"), labels_with(folder, SIM)
    workers = {w["worker_id"] for w in pq.read_table(folder / "ratings" / "workers.parquet").to_pylist()}
    assert SIM in workers and LM not in workers  # the last import: MiniLM only
    assert moved(both, only_lm) > 0.05 and moved(both, only_sim) > 0.05, (moved(both, only_lm), moved(both, only_sim))
    people = folder.parent / "people.csv"
    unknown = cli_error(*IMPORT, "--out", folder, "--results", people, "--models", "judge,nobody")
    assert "--models nobody: no such model; the models there: model:all-MiniLM-L6-v2, model:judge" in unknown


def test_a_rerun_of_one_model_makes_an_import_that_weighed_it_stale(folder: Path, tmp_path: Path):
    from csts_pipeline.report.annotations import annotation_summary

    people = folder.parent / "people.csv"
    cli(*IMPORT, "--out", folder, "--results", people, "--models", "all-MiniLM-L6-v2")
    cli("annotate", "split", "--out", folder)
    rate_lm(folder, sharp=True)  # not weighed by this import: it stays current
    cli("annotate", "split", "--out", folder, "--force")
    cli(*IMPORT, "--out", folder, "--results", people)  # both: a new input, recomputed without --force
    cli("annotate", "split", "--out", folder, "--force")
    rate_lm(folder)  # weighed: the import is stale for every reader
    stale = cli_error("annotate", "split", "--out", folder, "--force")
    assert f"stale: the {model_dir(folder, LM).name} output it was computed from has changed since" in stale
    assert "rerun `csts-pipeline annotate import --stage ratings --results FILE`" in stale
    assert "stale" in cli_error("export", "--format", "hf", "--annotate", folder, "--out", tmp_path / "hub")
    assert "stale" in cli_error("annotate", "export", "--stage", "ratings", "--more", "--out", folder)
    with pytest.raises(Exception, match="stale"):
        annotation_summary(folder, tmp_path)
    assert "up to date" not in cli(*IMPORT, "--out", folder, "--results", people)


def new_conditions(folder: Path) -> Path:
    """A conditions results file with other texts than the batch was rated on."""
    path = folder.parent / "conditions_again.csv"
    with (folder.parent / "conditions.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        row["condition_high"], row["condition_low"] = "The animals.", "The colours."
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_answers_scored_on_old_condition_texts_are_refused(folder: Path):
    """Issue 53 case 3: new condition texts, a new ratings export, then the import refuses each model's answers
    in one line naming the command that rates again; rated again, they are taken."""
    cli("annotate", "import", "--stage", "conditions", "--out", folder, "--results", new_conditions(folder), "--force")
    before_export = cli_error("annotate", "rate", "--out", folder, "--similarity-model", MINILM, "--device", "cpu")
    assert "rerun `csts-pipeline annotate export --stage ratings`" in before_export
    cli("annotate", "export", "--stage", "ratings", "--out", folder, "--force")
    people = folder.parent / "people.csv"
    refused = cli_error(*IMPORT, "--out", folder, "--results", people)
    assert f"stale: {SIM}'s answers were not computed from the current ratings export" in refused
    assert f"rerun `csts-pipeline annotate rate --similarity-model {MINILM}` first" in refused
    refused = cli_error(*IMPORT, "--out", folder, "--results", people, "--models", "judge")
    assert "rerun `csts-pipeline annotate rate --endpoint http://127.0.0.1:" in refused and "--model judge`" in refused
    cli("annotate", "rate", "--out", folder, "--similarity-model", MINILM, "--device", "cpu")
    cli(*IMPORT, "--out", folder, "--results", people, "--models", "all-MiniLM-L6-v2")
    rated = pq.read_table(folder / "ratings" / "ratings.parquet").to_pylist()
    assert sum(r["worker_id"] == SIM for r in rated) == 80


def test_a_one_model_folder_of_an_older_version_moves_into_its_own(folder: Path):
    """The older layout: one model's answers in model_ratings/ itself; the import moves them into the model's
    own folder (answer cache and all) and weighs them."""
    top = folder / MODEL_RATINGS
    shutil.move(model_dir(folder, LM), folder / "judge")
    shutil.rmtree(top)
    (folder / "judge").rename(top)
    cli(*IMPORT, "--out", folder, "--results", folder.parent / "people.csv")
    assert [run.worker for run in model_runs(folder)] == [LM] and (model_dir(folder, LM) / "answers.parquet").is_file()
    assert not (top / "_stage.json").exists()
    workers = {w["worker_id"] for w in pq.read_table(folder / "ratings" / "workers.parquet").to_pylist()}
    assert LM in workers and SIM not in workers


def test_the_summary_report_and_card_name_each_models_kind(folder: Path, tmp_path: Path):
    """Issue 53 case 5: each model with its kind and how its answers were read, everywhere it is described."""
    printed = cli(*IMPORT, "--out", folder, "--results", folder.parent / "people.csv")
    assert f"model {SIM}: similarity model, its answers are its similarity scores, read as the normal" in printed
    assert f"model {LM}: language model, its answers are P(1..5) and P(not pertinent)" in printed
    agreement = json.loads((folder / "ratings" / "agreement.json").read_text())
    assert [(m["worker_id"], m["model_kind"]) for m in agreement["models"]] == [
        (SIM, "similarity model"),
        (LM, "language model"),
    ]
    edges = ", ".join(f"{e:.3f}" for e in model_runs(folder)[0].record["bin_edges"])
    sim_words = (
        "similarity model, its answers are its similarity scores, read as the normal score of their rank in the "
        "batch through a normal density per true label that the import learns (its bins 1-5 among the batch's "
        f"quantiles kept beside them, bin edges {edges})"
    )
    report = dict(_agreement(folder / "ratings"))
    assert report[SIM].startswith(sim_words) and report[LM].startswith("language model, its answers are P(1..5)")
    cli("annotate", "split", "--out", folder)
    cli("export", "--format", "hf", "--annotate", folder, "--out", tmp_path / "card")
    card = (tmp_path / "card" / "README.md").read_text()
    assert "Models rated alongside people" in card and "Language models rated" not in card
    assert f"`{SIM}`: {sim_words}" in card and f"`{LM}`: language model, its answers are P(1..5)" in card
    # what measured each worker: the report per worker, the card by kind for people (no worker ids) and by name
    assert report["weights"].startswith("weights measured from the batch's evidence") and "intervals" in report
    from csts_pipeline.report.annotations import annotation_summary

    (ratings,) = [s for s in annotation_summary(folder, tmp_path)["steps"] if s["name"] == "ratings"]
    people = [w for w, _ in ratings["workers"] if not w.startswith("model:")]
    assert people and all(ratings["evidence"][w].startswith("repeats") for w in people)
    assert ratings["evidence"][SIM].startswith("agreement with people")
    assert "Weights: the people's reliability was measured by their evidence (people with each kind: repeats" in card
    assert f"`{SIM}` by its agreement with people" in card and "90% intervals" in card
    assert not any(w in card for w in people)
