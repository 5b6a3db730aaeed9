"""`annotate rate --similarity-model`: a similarity model (a `train` output, or a sentence-transformers model: the
packaged all-MiniLM-L6-v2) as one more worker, its score's quantile bin as its answer; and the round trip a user
runs with a trained model (`annotate rate --similarity-model`). Real text: the STS Benchmark
sample in tests/data/stsb."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from scipy.stats import spearmanr

from csts_pipeline.stages.annotate.layout import model_dir
from csts_pipeline.stages.annotate.steps.similarity_rater import ordinal_bins
from csts_pipeline.testing.command_path import People, figures, first_batch, follow_up, prepare_folder
from tests.annotate.test_annotate import cli, cli_error
from tests.conftest import REPO

MINILM = "packaged:all-MiniLM-L6-v2"
STSB = REPO / "tests" / "data" / "stsb"


def stsb_pairs(name: str) -> list[dict]:
    """The sample's rows: sentences and gold (0-5)."""
    with (STSB / name).open(encoding="utf-8", newline="") as handle:
        rows = [r for r in csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE) if len(r) >= 7]
    return [{"s1": r[5], "s2": r[6], "gold": float(r[4])} for r in rows]


def results(paths: list[Path]) -> list[str | Path]:
    """`--results FILE` for each file."""
    return [part for path in paths for part in ("--results", path)]


def folder_of(pairs: list[dict], folder: Path) -> dict[str, float]:
    """An annotate folder with the pairs' rating tasks exported; the truth (1 + 0.8 x gold) per item id."""
    items = prepare_folder([(p["s1"], p["s2"]) for p in pairs], folder)
    return {item: 1 + 0.8 * pairs[pair]["gold"] for item, (pair, _) in items.items()}


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, float], str]:
    """120 STS-B pairs (240 items) rated by the packaged MiniLM through the CLI."""
    folder = tmp_path_factory.mktemp("similarity") / "annotate"
    truth = folder_of(stsb_pairs("sts-test.csv")[:120], folder)
    output = cli("annotate", "rate", "--out", folder, "--similarity-model", MINILM, "--device", "cpu")
    return folder, truth, output


def test_scores_become_bins_at_the_batch_quantiles():
    scores = np.linspace(-0.2, 0.9, 100)
    bins, edges = ordinal_bins(scores)
    assert np.bincount(bins).tolist() == [0, 20, 20, 20, 20, 20] and len(edges) == 4
    assert (np.diff(bins) >= 0).all()  # the order of the scores is kept
    tied, _ = ordinal_bins(np.array([0.5] * 6 + [0.6, 0.7, 0.8, 0.9]))
    assert len(set(tied[:6].tolist())) == 1  # ties stay together


def test_the_help_and_the_reading_describe_the_score_read_through_its_density(tmp_path: Path):
    """The import reads a similarity model's whole score through a density per true label (score_density.py):
    `annotate rate --help`, `annotate rate`'s summary and workers.parquet's `model_reading` say so, not bins whose
    meaning is learned; a folder of an older version, without scores.parquet, is read by its bins and says so."""
    from csts_pipeline.stages.annotate.steps.model_folders import ModelRun
    from csts_pipeline.stages.annotate.steps.similarity_rater import describe_similarity

    said = " ".join(cli("annotate", "rate", "--help").replace("│", " ").split())  # rich wraps in a box
    assert "through a density per true label" in said and "what each bin means" not in said
    record = {"worker_id": "model:m", "model": {"kind": "similarity"}, "bin_edges": [0.1, 0.2, 0.3, 0.4]}
    (tmp_path / "scores.parquet").write_bytes(b"")
    reading = ModelRun(tmp_path, record).reading
    assert reading.startswith("its answers are its similarity scores, read as the normal score of their rank")
    assert "bin edges 0.100, 0.200, 0.300, 0.400" in reading
    (tmp_path / "scores.parquet").unlink()
    assert ModelRun(tmp_path, record).reading.startswith("its answers are bins 1-5 of its similarity score")
    record |= {"counts": {"items": 8, "per_bin": [2, 2, 2, 1, 1]}, "files": {"ratings": "r.parquet"}}
    assert "reads the score through a density per true label" in describe_similarity(record)


@pytest.mark.slow
def test_the_similarity_model_rates_every_item_with_its_conditioned_cosine(scored):
    folder, truth, output = scored
    assert "240 items scored by model:all-MiniLM-L6-v2" in output and "edges" in output
    minilm = model_dir(folder, "model:all-MiniLM-L6-v2")
    rows = pq.read_table(minilm / "ratings.parquet").to_pylist()
    scores = {r["item_id"]: r for r in pq.read_table(minilm / "scores.parquet").to_pylist()}
    assert len(rows) == 240 and {r["worker_id"] for r in rows} == {"model:all-MiniLM-L6-v2"}
    assert all(r["distribution"] == np.eye(5)[r["rating"] - 1].tolist() for r in rows)  # one-hot on the bin
    assert all(r["p_not_pertinent"] is None and not r["not_pertinent"] for r in rows)  # pertinence not asked
    assert all(scores[r["item_id"]]["bin"] == r["rating"] for r in rows)
    assert np.bincount([r["rating"] for r in rows]).tolist()[1:] == [48] * 5
    record = json.loads((minilm / "_stage.json").read_text())
    edges = np.quantile([s["score"] for s in scores.values()], [0.2, 0.4, 0.6, 0.8])
    assert np.allclose(record["bin_edges"], edges, atol=1e-5)
    # the score is the cosine of (sentence, condition) encoded as a tokenizer pair and mean-pooled, as train's
    # bi-encoder reads a C-STS row
    from transformers import AutoModel, AutoTokenizer

    from csts_pipeline.pipeline.packaged_models import resolve_model_path

    path = resolve_model_path(MINILM)
    tokenizer, encoder = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path)
    triplet = pq.read_table(folder / "conditions" / "conditions.parquet").to_pylist()[3]
    with torch.no_grad():
        pooled = []
        for sentence in (triplet["sentence1"], triplet["sentence2"]):
            batch = tokenizer(sentence, triplet["condition"], return_tensors="pt")
            hidden = encoder(**batch).last_hidden_state[0]
            pooled.append(hidden.mean(0))
        cosine = float(torch.nn.functional.cosine_similarity(pooled[0], pooled[1], dim=0))
    assert scores[triplet["item_id"]]["score"] == pytest.approx(cosine, abs=1e-4)
    # real skill on real pairs
    ids = list(scores)
    assert spearmanr([scores[i]["score"] for i in ids], [truth[i] for i in ids]).statistic > 0.6
    assert "up to date" in cli("annotate", "rate", "--out", folder, "--similarity-model", MINILM, "--device", "cpu")


@pytest.mark.slow
def test_the_import_weighs_the_bins_against_people(scored, tmp_path: Path):
    folder, truth, _ = scored
    people = People.around(truth, seed=4, ambiguity=0.3)
    given = [first_batch(folder, people, 1, tmp_path / "one.csv", 4)]
    cli("annotate", "import", "--stage", "ratings", "--out", folder, *results(given), "--aggregate", "model")
    workers = {r["worker_id"]: r for r in pq.read_table(folder / "ratings" / "workers.parquet").to_pylist()}
    model = workers["model:all-MiniLM-L6-v2"]
    assert model["answers"] == 240 and model["reliability"] > 0.6 and not model["unreliable"]
    with_model = figures(folder, truth)["spearman"]
    # the same people alone: the model's rows moved away
    (folder / "model_ratings").rename(tmp_path / "model_ratings")
    cli("annotate", "import", "--stage", "ratings", "--out", folder, *results(given), "--aggregate", "model")
    alone = figures(folder, truth)["spearman"]
    (tmp_path / "model_ratings").rename(folder / "model_ratings")
    assert with_model > alone + 0.03, (with_model, alone)


@pytest.mark.slow
def test_bad_similarity_models_are_one_line_errors(scored, tmp_path: Path):
    folder, _, _ = scored
    both = cli_error("annotate", "rate", "--out", folder, "--similarity-model", MINILM, "--model", "x")
    assert "--similarity-model replaces --model" in both
    missing = cli_error("annotate", "rate", "--out", folder, "--similarity-model", tmp_path / "nowhere")
    assert "nowhere" in missing
    file = tmp_path / "weights.bin"
    file.write_bytes(b"0")
    assert "is a folder" in cli_error("annotate", "rate", "--out", folder, "--similarity-model", file)


@pytest.mark.slow
def test_the_round_trip_with_a_trained_model(tmp_path: Path):
    """People label a first batch, `train` learns from it, the trained model rates the next batch, `export --more`
    routes people, the import weighs them together and the dataset card says what the model replaced."""
    pairs = stsb_pairs("sts-train.csv")
    first, second = tmp_path / "first" / "annotate", tmp_path / "second" / "annotate"
    truth = folder_of(pairs[:60], first)
    people = People.around(truth | folder_of(pairs[60:160], second), seed=2)
    one = first_batch(first, people, 3, tmp_path / "first.csv", 2)
    cli("annotate", "import", "--stage", "ratings", "--out", first, "--results", one, "--aggregate", "model")
    cli("annotate", "split", "--out", first, "--ratios", "70:15:15")
    csts = first / "csts"
    trained = tmp_path / "trained"
    cli(
        "train", "--train", csts / "train.parquet", "--validation", csts / "validation.parquet",
        "--test", csts / "test.parquet", "--out", trained, "--model", MINILM, "--encoding", "bi",
        "--pooler", "mean", "--epochs", "1", "--batch-size", "16", "--max-length", "48", "--device", "cpu",
    )  # fmt: skip
    rated = cli("annotate", "rate", "--out", second, "--similarity-model", trained, "--device", "cpu")
    assert "200 items scored by model:trained" in rated
    record = json.loads((model_dir(second, "model:trained") / "_stage.json").read_text())
    assert record["model"]["model"] == str(trained) and "csts_model.json" in record["model"]["files"]
    given = [first_batch(second, people, 1, tmp_path / "second.csv", 3)]
    cli("annotate", "import", "--stage", "ratings", "--out", second, *results(given), "--aggregate", "model")
    routed = cli("annotate", "export", "--stage", "ratings", "--more", "--out", second)
    assert "items need more ratings" in routed
    given.append(follow_up(second, people, given, tmp_path / "more.csv", 5))
    summary = cli("annotate", "import", "--stage", "ratings", "--out", second, *results(given), "--aggregate", "model")
    assert "model:trained" in summary
    cli("annotate", "split", "--out", second)
    card = tmp_path / "card"
    cli("export", "--format", "hf", "--annotate", second, "--out", card)
    text = (card / "README.md").read_text()
    assert "`model:trained`: similarity model" in text and "200 answers" in text and "human ratings were bought" in text


def test_a_question_not_asked_is_no_flag_and_a_missing_rating_is_no_answer():
    """A similarity row (P(not pertinent) null: never asked) enters as an unflagged answer with its distribution;
    a language-model row whose rating is null (no answer) is left out."""
    import pyarrow as pa

    from csts_pipeline.stages.annotate.steps.model_ratings import answers_of

    one_hot = [0.0, 0.0, 1.0, 0.0, 0.0]
    table = pa.Table.from_pylist(
        [
            {"item_id": "a", "worker_id": "model:sim", "rating": 3, "distribution": one_hot, "p_not_pertinent": None},
            {"item_id": "b", "worker_id": "model:lm", "rating": None, "distribution": one_hot, "p_not_pertinent": 0.1},
        ]
    )
    found = answers_of(table, [{"item_id": "a"}, {"item_id": "b"}], {})
    assert [(r.item, r.worker, r.rating, r.not_pertinent) for r in found.ratings] == [(0, "model:sim", 3, False)]
    assert found.ratings[0].p_not_pertinent is None
