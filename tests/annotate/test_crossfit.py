"""`annotate crossfit`: the batch's own labels train K models, each rating only the fold it never saw, as one more
worker of the ratings import (docs/annotate-models.md, "The batch's own model, fitted out of fold"). Small and
CPU-fast: 30 STS-B pairs from tests/data/stsb, a random two-layer BERT, three folds, one epoch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.packaged_models import resolve_model_path
from csts_pipeline.stages.annotate.steps import csts_split, publish
from csts_pipeline.stages.annotate.steps.crossfit import crossfit
from csts_pipeline.stages.annotate.steps.crossfit_folds import sentence_pair_key
from csts_pipeline.stages.annotate.steps.options import CrossfitOptions, RatingsImportOptions, SplitOptions
from csts_pipeline.stages.annotate.steps.ratings import import_ratings
from csts_pipeline.stages.train import train as train_stage
from csts_pipeline.testing.command_path import prepare_folder, task_ids, write_results
from tests.annotate.test_annotate import cli, cli_error
from tests.annotate.test_similarity_rater import stsb_pairs

MINILM = "packaged:all-MiniLM-L6-v2"


@pytest.fixture(autouse=True)
def one_thread():
    """A tiny model gains nothing from threads, and other runs share the cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random two-layer BERT (hidden 32) with MiniLM's tokenizer, as tests/train builds one: no download."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(MINILM))
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, initializer_range=0.1)  # fmt: skip
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def options(model: Path, **changes) -> CrossfitOptions:
    settings = {"model": str(model), "folds": 3, "epochs": 1, "batch_size": 8, "max_length": 48, "device": "cpu"}
    return CrossfitOptions(**(settings | changes))


def person(truth: dict[str, float], ids: list[str], seed: int, worker: str = "p0") -> list[dict]:
    """One rating an item, around the truth."""
    rng = np.random.default_rng(seed)
    ratings = np.clip(np.rint([truth[i] + rng.normal(0, 0.8) for i in ids]), 1, 5).astype(int)
    return [
        {"item_id": i, "worker_id": worker, "rating": int(r), "not_pertinent": "false"} for i, r in zip(ids, ratings)
    ]


@pytest.fixture
def batch(tmp_path: Path) -> tuple[Path, dict[str, float], Path]:
    """30 STS-B pairs and, as pair 31, pair 1's sentences again (swapped): one rating an item, imported."""
    pairs = stsb_pairs("sts-train.csv")[:30]
    pairs.append({"s1": pairs[0]["s2"], "s2": pairs[0]["s1"], "gold": pairs[0]["gold"]})
    folder = tmp_path / "annotate"
    items = prepare_folder([(p["s1"], p["s2"]) for p in pairs], folder)
    truth = {item: 1 + 0.8 * pairs[pair]["gold"] for item, (pair, _) in items.items()}
    results = write_results(tmp_path / "r1.csv", person(truth, task_ids(folder / "ratings_tasks"), 0))
    import_ratings(folder, [results])
    return folder, truth, results


def crossfit_folder(folder: Path) -> Path:
    (found,) = (folder / "model_ratings").glob("crossfit-*")
    return found


def test_no_item_is_rated_by_a_model_that_saw_its_pair_or_its_sentences(batch, tiny_model):
    folder, _, _ = batch
    record = crossfit(folder, options(tiny_model))
    out = crossfit_folder(folder)
    scores = pq.read_table(out / "scores.parquet").to_pylist()
    tasks = {t["item_id"]: t for t in map(json.loads, (folder / "ratings_tasks" / "tasks.jsonl").open())}
    assert sorted(s["item_id"] for s in scores) == sorted(tasks)  # every item rated once
    for k in range(3):
        learnt = pq.read_table(out / "folds" / f"fold-{k + 1}" / "train.parquet").to_pylist()
        seen_pairs = {r["pair_id"] for r in learnt}
        seen_sentences = {sentence_pair_key(r) for r in learnt}
        rated = [tasks[s["item_id"]] for s in scores if s["fold"] == k]
        assert rated and learnt
        assert not any(t["pair_id"] in seen_pairs or sentence_pair_key(t) in seen_sentences for t in rated)
    first = [s["fold"] for s in scores if tasks[s["item_id"]]["pair_id"] in (0, 30)]
    assert len(set(first)) == 1 and len(first) == 4  # the repeated sentence pair shares its fold
    assert (
        record["learnt_from"]["import"] == json.loads((folder / "ratings" / "_stage.json").read_text())["fingerprint"]
    )
    assert record["worker_id"] == "model:crossfit-" + tiny_model.name and len(record["folds"]) == 3
    rows = pq.read_table(out / "ratings.parquet").to_pylist()
    assert {r["worker_id"] for r in rows} == {record["worker_id"]} and all(1 <= r["rating"] <= 5 for r in rows)


def test_the_folds_learn_the_labels_order_with_the_answers_spread_or_the_labels_as_they_are(batch, tiny_model):
    """By default each fold learns the import's labels in their order, given the spread of the people's answers
    (as `annotate split --label-spread answers`); `--label-spread import` learns them as they are."""
    folder, _, results = batch
    import_ratings(folder, [results], RatingsImportOptions(aggregate="model"), force=True)  # posterior means
    items = pq.read_table(folder / "ratings" / "items.parquet").to_pylist()
    label = {r["item_id"]: r["label"] for r in items if r["status"] == "kept"}
    answers = pq.read_table(folder / "ratings" / "ratings.parquet").column("rating").to_numpy()
    learnt = {}
    for spread in ("answers", "import"):
        record = crossfit(folder, options(tiny_model, label_spread=spread))
        assert record["model"]["label_spread"] == spread
        rows = pq.read_table(crossfit_folder(folder) / "folds" / "fold-1" / "train.parquet").to_pylist()
        learnt[spread] = {r["item_id"]: r["label"] for r in rows}
    ids = sorted(learnt["import"])
    assert all(learnt["import"][i] == label[i] for i in ids)
    spread = np.array([learnt["answers"][i] for i in ids])
    before = np.array([label[i] for i in ids])
    assert np.array_equal(np.argsort(before, kind="stable"), np.argsort(spread, kind="stable"))
    assert spread.std() > before.std() and spread.std() == pytest.approx(answers[answers > 0].std(), rel=0.25)


def test_new_answers_make_it_stale_and_the_import_that_weighs_it_does_not(batch, tiny_model, tmp_path):
    folder, truth, first = batch
    crossfit(folder, options(tiny_model))
    import_ratings(folder, [first])  # weighs the crossfit
    agreement = json.loads((folder / "ratings" / "agreement.json").read_text())
    assert any("learnt from 3 folds" in m["model_reading"] for m in agreement["models"])  # says what it learnt
    assert crossfit(folder, options(tiny_model))["status"] == "up-to-date"  # not stale by the import
    csts_split.split(folder, SplitOptions(ratios="60:20:20"))
    more = write_results(tmp_path / "r2.csv", person(truth, task_ids(folder / "ratings_tasks"), 1, "p1"))
    import_ratings(folder, [first, more])  # new people's answers: the crossfit learnt from the old
    with pytest.raises(UserError, match=r"stale: model:crossfit-.*learnt from other people's answers"):
        csts_split.split(folder, SplitOptions(ratios="60:20:20"))
    with pytest.raises(UserError, match="stale"):
        publish.gather(folder, None, "x", "cc-by-4.0")
    again = crossfit(folder, options(tiny_model))
    assert again["status"] == "done" and again["counts"]["folds_resumed"] == 0
    import_ratings(folder, [first, more])
    csts_split.split(folder, SplitOptions(ratios="60:20:20"))


def test_a_killed_run_resumes_from_its_finished_folds(batch, tiny_model, monkeypatch):
    folder, _, _ = batch
    real, calls = train_stage.run, []

    def killed_in_fold_3(*args, **kwargs):
        calls.append(args[0].out)
        if len(calls) == 3:
            raise KeyboardInterrupt("killed in fold 3")
        return real(*args, **kwargs)

    monkeypatch.setattr(train_stage, "run", killed_in_fold_3)
    with pytest.raises(KeyboardInterrupt):
        crossfit(folder, options(tiny_model))
    assert not list((folder / "model_ratings").glob("crossfit-*"))  # nothing committed
    calls.clear()
    record = crossfit(folder, options(tiny_model))
    assert [path.parent.name for path in calls] == ["fold-3"]  # folds 1 and 2 were not trained again
    assert record["counts"]["folds_resumed"] == 2


def test_the_command_rates_out_of_fold_and_refuses_bad_input_in_one_line(batch, tiny_model):
    folder, _, _ = batch
    base = ["annotate", "crossfit", "--out", folder, "--model", tiny_model, "--device", "cpu"]
    assert "--folds must be at least 2" in cli_error(*base, "--folds", "1")  # one line, exit 2
    assert "only 30 groups" in cli_error(*base, "--folds", "40")  # 31 pairs, two of the same sentences
    assert "not found" in cli_error(*base[:-4], "--model", folder / "no-such-model")
    assert "--label-spread must be one of import, answers" in cli_error(*base, "--label-spread", "wide")
    assert not list((folder / "model_ratings").glob("[!.]*"))  # nothing written (a lock file aside)
    output = cli(*base, "--folds", "2", "--epochs", "1", "--batch-size", "8", "--max-length", "48")
    assert f"rated out of fold by model:crossfit-{tiny_model.name} (2 folds" in output
    assert "up to date" in cli(*base, "--folds", "2", "--epochs", "1", "--batch-size", "8", "--max-length", "48")
