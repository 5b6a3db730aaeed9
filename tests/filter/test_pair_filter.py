"""The filter's criteria, metrics and encoder: hand-made pairs at the thresholds, the vectorised paths against the
plain reference on real COCO captions, and loading the sentence encoder."""

from __future__ import annotations

import json
import math
import os
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import torch

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import load_manifest
from csts_pipeline.stages.filter.criteria import CRITERIA, Criteria, reference_pair_metrics, score_pairs
from csts_pipeline.stages.filter.metrics import NumbaPairMetrics, TextFeatures, TorchPairMetrics
from csts_pipeline.stages.filter.text import (
    bag_of_words,
    char_length,
    encode_texts,
    load_text_encoder,
    stopwords,
    word_count,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
COCO_CAPTIONS = DATA / "coco" / "captions_val2017_sample.json"
MINILM = "packaged:all-MiniLM-L6-v2"

# Hand-made captions for what real COCO text rarely or never holds.
EDGE_CAPTIONS = [
    "",
    "   ",
    "The a an of and to.",
    "It's what it's.",
    "A dog\u2019s toy \u2014 the \u2018best\u2019 one!",
    "Caf\u00e9 con leche at the cr\u00eape stand in Z\u00fcrich.",
    "Cafe\u0301 con leche at the cre\u0302pe stand in Zu\u0308rich.",
    "\u00c9COLE primaire: \u00e9l\u00e8ves de 3 \u00e0 5 ans",
    "2 dogs, 3 cats & 100% fun!!!",
    "'Quoted' words and ''double quoted'' words",
    "don't won't can't shouldn't",
    "snake_case words with under_scores",
    "\uff21\uff4e \uff49\uff4d\uff41\uff47\uff45 in fullwidth letters",
    "\u65e5\u672c\u8a9e\u306e\u30ad\u30e3\u30d7\u30b7\u30e7\u30f3 \u72ac",
    "The dog's dogs' dog",
    "A 10-year-old boy, aged 10, holds 3.5 kg of apples.",
    "\tA cat sleeps on a red sofa near the window.\n",
]


def coco_captions() -> list[str]:
    return [a["caption"] for a in json.loads(COCO_CAPTIONS.read_text())["annotations"]]


def criteria_of(dataset: str) -> Criteria:
    manifest = load_manifest(REPO / "manifests" / f"{dataset}.yaml")
    return Criteria.from_config(manifest.filter)


def metrics_of(pairs: list[tuple[str, str]], embeddings: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The vectorised metrics of hand-made pairs (cosine only when embeddings are given, one row per sentence)."""
    texts = [sentence for pair in pairs for sentence in pair]
    backend = NumbaPairMetrics(TextFeatures.build(texts), embeddings)
    first, second = np.arange(0, len(texts), 2), np.arange(1, len(texts), 2)
    iou, ratio, length = backend.cheap(first, second)
    metrics = {"iou": iou, "ratio": ratio, "length": length}
    if embeddings is not None:
        metrics["simcse_cosine"] = backend.cosine(first, second)
    return metrics


# --- bag of words -------------------------------------------------------------------------------------------------


def test_stopwords_are_nltks_english_list():
    reference = DATA / "nltk_stopwords_english.txt"  # NLTK's list, kept apart from the packaged resource
    assert len(stopwords()) == 179
    assert {"the", "a", "don't", "itself", "s", "t"} <= stopwords()
    assert stopwords() == frozenset(reference.read_text().split())


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("A man's dog is running, fast!", ["man's", "dog", "running", "fast"]),
        ("The a an of and to.", []),
        ("", []),
        ("It\u2019s the dog\u2019s bowl", ["dog's", "bowl"]),
        ("'Quoted' and ''double'' words", ["quoted", "double", "words"]),
        ("2 dogs, 3.5 cats & 100% fun", ["2", "dogs", "3", "5", "cats", "100", "fun"]),
        ("Caf\u00e9 NA\u00cfVE", ["caf\u00e9", "na\u00efve"]),
        ("Cafe\u0301", ["caf\u00e9"]),  # decomposed accents compose before matching
        ("snake_case", ["snake", "case"]),
        ("Dogs dogs DOGS", ["dogs", "dogs", "dogs"]),
    ],
)
def test_bag_of_words(text, words):
    assert bag_of_words(text) == words


def test_word_count_and_length_count_as_the_issue_says():
    assert word_count("  two\twords\n") == 2
    assert word_count("") == 0
    assert char_length("  padded text \n") == len("padded text")


# --- each criterion at and around its threshold, with both datasets' thresholds -------------------------------------


def sentence_of_length(n: int) -> str:
    """A caption-like sentence of exactly n characters."""
    base = "a man riding a wave on top of a surfboard near the shore at sunset "
    text = (base * (n // len(base) + 1))[:n]
    return text[:-1] + "x" if text.endswith(" ") else text


@pytest.mark.parametrize(("dataset", "threshold"), [("coco", 50), ("flickr30k", 48)])
def test_length_threshold(dataset, threshold):
    criteria = criteria_of(dataset)
    assert criteria.min_length == threshold
    longer = sentence_of_length(120)
    cases = {threshold - 1: True, threshold: False, threshold + 1: False}
    pairs = [(f"  {sentence_of_length(n)}\n", longer) for n in cases]
    lengths = metrics_of(pairs)["length"]
    assert lengths.tolist() == list(cases)
    assert [bool(criteria.fails("length", v)) for v in lengths] == list(cases.values())


@pytest.mark.parametrize("dataset", ["coco", "flickr30k"])
@pytest.mark.parametrize(
    ("shorter", "longer", "fails"), [(7, 10, False), (14, 20, False), (6, 10, True), (13, 19, True)]
)
def test_ratio_threshold(dataset, shorter, longer, fails):
    criteria = criteria_of(dataset)
    assert criteria.min_ratio == 0.7
    pair = (" ".join(["dog"] * shorter), " ".join(["cat"] * longer))
    (ratio,) = metrics_of([pair, pair[::-1]])["ratio"][:1]
    assert ratio == shorter / longer
    assert bool(criteria.fails("ratio", ratio)) is fails


def bags_with(common: int, union: int) -> tuple[str, str]:
    """Two sentences whose bags of words share `common` words out of `union`, with stopwords and repeats around."""
    own = union - common
    shared = [f"shared{i}" for i in range(common)]
    first = shared + [f"left{i}" for i in range(own // 2)]
    second = [f"right{i}" for i in range(own - own // 2)] + shared
    return "The " + " the ".join(first) + ".", "A " + " and ".join(second) + ", and " + shared[0] + " again!"


@pytest.mark.parametrize(
    ("common", "union", "fails_coco", "fails_flickr"),
    [(3, 25, False, False), (3, 24, True, False), (4, 25, True, False), (5, 25, True, False), (6, 25, True, True)],
)
def test_iou_threshold(common, union, fails_coco, fails_flickr):
    coco, flickr = criteria_of("coco"), criteria_of("flickr30k")
    assert (coco.max_iou, flickr.max_iou) == (0.12, 0.2)
    (iou,) = metrics_of([bags_with(common, union)])["iou"]
    assert iou == common / union
    assert bool(coco.fails("iou", iou)) is fails_coco
    assert bool(flickr.fails("iou", iou)) is fails_flickr


def test_iou_is_zero_when_both_bags_are_empty():
    metrics = metrics_of([("The a an of.", "and to the"), ("", "   "), ("the dog", "")])
    assert metrics["iou"].tolist() == [0.0, 0.0, 0.0]


def unit_pair(cosine: float) -> np.ndarray:
    """Two float32 unit vectors whose dot product is `cosine` (as float32)."""
    c = np.float32(cosine)
    return np.array([[1, 0], [c, math.sqrt(1 - float(c) ** 2)]], np.float32)


@pytest.mark.parametrize("dataset", ["coco", "flickr30k"])
def test_cosine_threshold_is_a_minimum_similarity(dataset):
    criteria = criteria_of(dataset)
    assert (criteria.min_cosine, criteria.max_cosine) == (0.4, None)
    just_below = np.nextafter(np.float32(0.4), np.float32(0))
    values = [0.4, float(just_below), 0.45, 0.35, -0.9]
    embeddings = np.concatenate([unit_pair(v) for v in values])
    pairs = [("a", "b")] * len(values)
    cosines = metrics_of(pairs, embeddings)["simcse_cosine"]
    assert cosines.astype(np.float32).tolist() == np.float32(values).tolist()
    assert [bool(criteria.fails("simcse_cosine", c)) for c in cosines] == [False, True, False, True, True]


def test_cosine_maximum_reads_the_bound_as_an_upper_limit():
    criteria = Criteria(min_cosine=None, max_cosine=0.4)
    assert criteria.rule("simcse_cosine") == "simcse_cosine <= 0.4"
    assert [bool(criteria.fails("simcse_cosine", v)) for v in (0.1, 0.4, 0.41)] == [False, False, True]
    both = Criteria(min_cosine=0.4, max_cosine=0.9)
    assert [bool(both.fails("simcse_cosine", v)) for v in (0.39, 0.6, 0.91)] == [True, False, True]
    assert not both.fails("simcse_cosine", float("nan"))  # not computed never fails


def test_switched_off_criteria_and_cheapest_first_order():
    criteria = Criteria(min_length=50, min_ratio=None, max_iou=0.12, min_cosine=None)
    assert criteria.active() == ("length", "iou")
    assert not criteria.needs_encoder
    assert criteria.first_failed({"length": 10, "ratio": 0.1, "iou": 0.9, "simcse_cosine": 0.0}) == "length"
    assert criteria.first_failed({"length": 60, "ratio": 0.1, "iou": 0.9, "simcse_cosine": 0.0}) == "iou"
    assert criteria.first_failed({"length": 60, "ratio": 0.1, "iou": 0.1, "simcse_cosine": 0.0}) is None
    assert CRITERIA == ("length", "ratio", "iou", "simcse_cosine")


# --- vectorised == reference on real captions -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_pairs():
    """~470 sentences (real COCO captions, those with apostrophes and digits first, plus the hand-made edge
    captions), their MiniLM embeddings, and 20k pairs among them including every edge caption."""
    captions = coco_captions()
    rng = np.random.default_rng(7)
    tricky = [c for c in captions if "'" in c or any(ch.isdigit() for ch in c)]
    plain = [captions[i] for i in rng.choice(len(captions), 250, replace=False)]
    texts = list(dict.fromkeys(tricky[:200] + plain + EDGE_CAPTIONS))
    model = load_text_encoder(MINILM, "model", torch.device("cpu"))
    embeddings = encode_texts(model, texts, 128)
    n_edge = len(EDGE_CAPTIONS)
    edge_rows = np.array([texts.index(c) for c in EDGE_CAPTIONS])
    first = np.concatenate([rng.integers(0, len(texts), 20_000), np.repeat(edge_rows, n_edge)])
    second = np.concatenate([rng.integers(0, len(texts), 20_000), np.tile(edge_rows, n_edge)])
    return texts, embeddings, first, second


def words_by_hand(text: str) -> set[str]:
    """The bag of words rule written out again, without the code under test (stages.filter.text): NFC, lower case,
    curly apostrophes as straight ones, runs of letters, digits and apostrophes, quote marks stripped from their
    ends, NLTK's English stopwords (the copy in tests/data) dropped."""
    drop = set((DATA / "nltk_stopwords_english.txt").read_text().split())
    text = unicodedata.normalize("NFC", text).lower().replace("\u2019", "'").replace("\u2018", "'")
    words, current = [], ""
    for ch in text + " ":
        if ch.isalnum() or ch == "'":
            current += ch
        else:
            words.append(current.strip("'"))
            current = ""
    return {word for word in words if word and word not in drop}


@pytest.mark.slow
def test_vectorised_metrics_equal_the_reference_exactly(real_pairs):
    texts, embeddings, first, second = real_pairs
    criteria = criteria_of("coco")
    scored = score_pairs(NumbaPairMetrics(TextFeatures.build(texts), embeddings), criteria, first, second, True)
    as64 = embeddings.astype(np.float64)
    reference = [reference_pair_metrics(texts[a], texts[b], as64[a], as64[b]) for a, b in zip(first, second)]
    for name in ("length", "ratio", "iou"):
        expected = np.array([r[name] for r in reference])
        np.testing.assert_array_equal(scored.metrics[name], expected, err_msg=name)
    bags = [words_by_hand(text) for text in texts]  # IoU once more, from a tokenizer the code does not share
    by_hand = [
        len(bags[a] & bags[b]) / len(bags[a] | bags[b]) if bags[a] | bags[b] else 0.0 for a, b in zip(first, second)
    ]
    np.testing.assert_array_equal(scored.metrics["iou"], by_hand)
    expected_cosine = np.array([r["simcse_cosine"] for r in reference])
    cosine = scored.metrics["simcse_cosine"]
    np.testing.assert_array_equal(cosine.astype(np.float32), expected_cosine.astype(np.float32))
    expected_failed = [criteria.first_failed(r) for r in reference]
    assert [None if c < 0 else CRITERIA[c] for c in scored.first_failed] == expected_failed
    # the cheap-first default decides the same, computing the cosine only where it matters
    default = score_pairs(NumbaPairMetrics(TextFeatures.build(texts), embeddings), criteria, first, second)
    np.testing.assert_array_equal(default.first_failed, scored.first_failed)
    assert default.cosine_computed.sum() < len(first)
    # the edge cases were really exercised
    iou = scored.metrics["iou"]
    empty = np.array([not bag_of_words(texts[a]) and not bag_of_words(texts[b]) for a, b in zip(first, second)])
    assert empty.sum() > 10 and (iou[empty] == 0).all()
    assert (scored.metrics["length"] == 0).any() and (scored.metrics["ratio"] == 0).any()
    assert len(set(expected_failed)) == 5  # every criterion rejects something, and some pairs are kept


@pytest.mark.slow
def test_torch_path_equals_numba_path_on_cpu(real_pairs):
    texts, embeddings, first, second = real_pairs
    features = TextFeatures.build(texts)
    numba_path = NumbaPairMetrics(features, embeddings)
    torch_path = TorchPairMetrics(features, embeddings, torch.device("cpu"), block=4096, cosine_block=1000)
    for ours, theirs in zip(torch_path.cheap(first, second), numba_path.cheap(first, second)):
        np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(
        torch_path.cosine(first, second).astype(np.float32), numba_path.cosine(first, second).astype(np.float32)
    )
    criteria = criteria_of("flickr30k")
    np.testing.assert_array_equal(
        score_pairs(torch_path, criteria, first, second).first_failed,
        score_pairs(numba_path, criteria, first, second).first_failed,
    )


def test_empty_batches_score_to_empty_results():
    backend = NumbaPairMetrics(TextFeatures.build([]), np.zeros((0, 4), np.float32))
    scored = score_pairs(backend, criteria_of("coco"), np.array([], np.int64), np.array([], np.int64))
    assert len(scored) == 0 and scored.kept.shape == (0,)


# --- the sentence encoder -------------------------------------------------------------------------------------------


def test_cls_and_mean_pooling_build_an_encoder_over_the_raw_transformer():
    texts = ["A dog runs on the beach.", "Two people ride bicycles down a city street."]
    own = encode_texts(load_text_encoder(MINILM, "model", torch.device("cpu")), texts, 8)
    mean = encode_texts(load_text_encoder(MINILM, "mean", torch.device("cpu")), texts, 8)
    cls = encode_texts(load_text_encoder(MINILM, "cls", torch.device("cpu")), texts, 8)
    np.testing.assert_allclose(mean, own, atol=1e-5)  # all-MiniLM-L6-v2's own pooling is the mean
    assert cls.shape == own.shape and np.abs(cls - own).max() > 1e-2
    np.testing.assert_allclose(np.linalg.norm(cls, axis=1), 1, atol=1e-5)


def test_cls_pooler_embeds_as_simcses_own_tool():
    """SimCSE's tool takes transformers' `pooler_output` (dense + tanh over CLS), normalised to unit length."""
    from transformers import AutoModel, AutoTokenizer

    from csts_pipeline.pipeline.packaged_models import resolve_model_path

    texts = ["A dog runs on the beach.", "Two people ride bicycles down a city street."]
    ours = encode_texts(load_text_encoder(MINILM, "cls_pooler", torch.device("cpu")), texts, 8)
    path = resolve_model_path(MINILM)
    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    with torch.no_grad():
        pooled = model(**tokenizer(texts, padding=True, return_tensors="pt")).pooler_output
    np.testing.assert_allclose(ours, torch.nn.functional.normalize(pooled, dim=1).numpy(), atol=1e-5)
    cls = encode_texts(load_text_encoder(MINILM, "cls", torch.device("cpu")), texts, 8)
    assert np.abs(ours - cls).max() > 1e-2


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("/nonexistent/simcse-model", "download it first"),
        ("princeton-nlp/sup-simcse-roberta-large-not-cached", "local folder"),
        ("packaged:no-such-model", "packaged models: packaged:all-MiniLM-L6-v2"),
    ],
)
@pytest.mark.parametrize("pooling", ["model", "cls"])
def test_encoder_loading_failures_are_user_errors(name, message, pooling):
    with pytest.raises(UserError, match=message):
        load_text_encoder(name, pooling, torch.device("cpu"))
