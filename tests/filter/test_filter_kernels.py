"""The filter's fast paths against the plain ones: the fused kernel (cheap criteria, cosine and decisions in one
pass, IoU by stamping) against the reference oracle and the two-step path, and the dense caption-id table against
the binary search. No model and no shared data: hand-made edge captions and random unit embeddings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.filter import kernels
from csts_pipeline.stages.filter.criteria import (
    CRITERIA,
    HISTOGRAM_EDGES,
    Criteria,
    reference_pair_metrics,
    score_pairs,
)
from csts_pipeline.stages.filter.kernels import histograms
from csts_pipeline.stages.filter.lookup import CaptionLookup
from csts_pipeline.stages.filter.metrics import NumbaPairMetrics, TextFeatures, TorchPairMetrics
from tests.filter.test_pair_filter import EDGE_CAPTIONS

SENTENCES = [
    *EDGE_CAPTIONS,
    "A man rides a horse along the beach at sunset near the water.",
    "A man is riding a horse on the beach while the sun sets.",
    "Two dogs play with a red frisbee in a green park on a sunny day.",
    "A plate of food with broccoli, rice and chicken on a wooden table.",
    "A plate with chicken, rice and some broccoli sits on a table.",
    "A kitchen with white cabinets, a stove, and a large window over the sink.",
    "Several people stand in line at a bus stop in the rain with umbrellas.",
    "dog",
    "Dog dog DOG dog.",
]
CRITERIA_SETS = [
    Criteria(min_length=50, min_ratio=0.7, max_iou=0.12, min_cosine=0.0),
    Criteria(min_length=20, min_ratio=0.5, max_iou=0.3, min_cosine=-0.05, max_cosine=0.1),
    Criteria(min_length=None, min_ratio=0.7, max_iou=None, min_cosine=None),
    Criteria(max_cosine=0.0),
    Criteria(),
]


class TwoStep:
    """The generic path of score_pairs (cheap metrics, then the cosine of the survivors), with the cheap metrics of
    the torch backend: an implementation of its own (sorted bags and searchsorted, not the fused kernel's stamps),
    so that the fused kernel is never compared with itself; the cosine by the separate numba cosine kernel (the
    torch one sums in another order, a last-bit difference)."""

    def __init__(self, backend: NumbaPairMetrics):
        other = TorchPairMetrics(backend.features, backend.embeddings, torch.device("cpu"))
        self.cheap, self.cosine = other.cheap, backend.cosine


@pytest.fixture(scope="module")
def pairs():
    """Sentences, unit embeddings, and pairs: every edge pair, then random pairs in runs of a repeated first
    sentence (as mine writes them) long enough to cross several kernel blocks."""
    rng = np.random.default_rng(3)
    n = len(SENTENCES)
    vectors = rng.standard_normal((n, 16)).astype(np.float32)
    embeddings = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    runs = 3 * kernels.PAIRS_PER_BLOCK // 5
    first = np.concatenate([np.repeat(np.arange(n), n), np.repeat(rng.integers(0, n, runs), 5)])
    second = np.concatenate([np.tile(np.arange(n), n), rng.integers(0, n, runs * 5)])
    return embeddings, first, second


@pytest.mark.parametrize("criteria", CRITERIA_SETS, ids=lambda c: c.rule("simcse_cosine") + "," + c.rule("length"))
@pytest.mark.parametrize("cosine_for_all", [False, True])
def test_fused_kernel_equals_the_two_step_path(pairs, criteria, cosine_for_all):
    embeddings, first, second = pairs
    backend = NumbaPairMetrics(TextFeatures.build(SENTENCES), embeddings)
    fused = score_pairs(backend, criteria, first, second, cosine_for_all)
    plain = score_pairs(TwoStep(backend), criteria, first, second, cosine_for_all)
    np.testing.assert_array_equal(fused.first_failed, plain.first_failed)
    np.testing.assert_array_equal(fused.cosine_computed, plain.cosine_computed)
    assert fused.failed.keys() == plain.failed.keys() == set(criteria.active())
    for name in fused.failed:
        np.testing.assert_array_equal(fused.failed[name], plain.failed[name], err_msg=name)
    for name in CRITERIA:
        np.testing.assert_array_equal(fused.metrics[name], plain.metrics[name], err_msg=name)
        assert fused.metrics[name].dtype == plain.metrics[name].dtype
        # the histograms counted inside the fused kernel, bin for bin, against np.histogram of its metrics
        edges, values = HISTOGRAM_EDGES[name], fused.metrics[name].astype(np.float64)
        for row, select in enumerate([~np.isnan(values), ~np.isnan(values) & fused.kept]):
            expected = np.histogram(np.clip(values[select], edges[0], edges[-1]), bins=edges)[0]
            np.testing.assert_array_equal(fused.histograms[name][row], expected, err_msg=f"{name} {row}")
            np.testing.assert_array_equal(plain.histograms[name][row], expected, err_msg=f"{name} {row}")


def test_fused_kernel_equals_the_reference_on_edge_captions(pairs):
    embeddings, first, second = pairs
    first, second = first[: len(SENTENCES) ** 2], second[: len(SENTENCES) ** 2]
    backend = NumbaPairMetrics(TextFeatures.build(SENTENCES), embeddings)
    as64 = embeddings.astype(np.float64)
    reference = [reference_pair_metrics(SENTENCES[a], SENTENCES[b], as64[a], as64[b]) for a, b in zip(first, second)]
    for criteria in CRITERIA_SETS:
        scored = score_pairs(backend, criteria, first, second, cosine_for_all=True)
        for name in ("length", "ratio", "iou"):
            np.testing.assert_array_equal(scored.metrics[name], [r[name] for r in reference], err_msg=name)
        cosine = np.array([r["simcse_cosine"] for r in reference]) if criteria.needs_encoder else np.nan
        np.testing.assert_allclose(scored.metrics["simcse_cosine"], cosine, rtol=0, atol=1e-12)
        expected = [criteria.first_failed(r) for r in reference]
        assert [None if c < 0 else CRITERIA[c] for c in scored.first_failed] == expected


def test_fused_kernel_without_embeddings_or_pairs():
    backend = NumbaPairMetrics(TextFeatures.build(SENTENCES), None)
    criteria = Criteria(min_length=10, max_iou=0.5)
    first, second = np.arange(len(SENTENCES)), np.arange(len(SENTENCES))[::-1].copy()
    scored = score_pairs(backend, criteria, first, second)
    assert np.isnan(scored.metrics["simcse_cosine"]).all() and not scored.cosine_computed.any()
    assert "simcse_cosine" not in scored.failed
    empty = score_pairs(backend, criteria, np.array([], np.int64), np.array([], np.int64))
    assert len(empty) == 0
    words_only = NumbaPairMetrics(TextFeatures.build(["", " "]), None)
    assert words_only.cheap(np.array([0]), np.array([1]))[0].tolist() == [0.0]


# --- caption ids -> rows -------------------------------------------------------------------------------------------


def lookups(caption_ids: np.ndarray) -> tuple[CaptionLookup, CaptionLookup]:
    sentence_of_row = np.arange(len(caption_ids)) // 2
    dense = CaptionLookup(caption_ids, sentence_of_row, Path("captions"))
    sparse = CaptionLookup(caption_ids, sentence_of_row, Path("captions"))
    sparse.table = None  # the binary search
    return dense, sparse


def test_dense_table_and_binary_search_find_the_same_sentences():
    rng = np.random.default_rng(0)
    caption_ids = rng.permutation(50_000)[:5_000].astype(np.int64)
    caption_ids[7] = caption_ids[3]  # a repeated id resolves to its first row on both paths
    dense, sparse = lookups(caption_ids)
    assert dense.table is not None
    picks = rng.integers(0, len(caption_ids), 100_000)
    sentences = dense.sentences(caption_ids[picks], Path("shard"))
    expected = np.where(picks == 7, 3, picks) // 2  # sentence_of_row of the first row holding the id
    np.testing.assert_array_equal(sentences, expected)
    np.testing.assert_array_equal(sparse.sentences(caption_ids[picks], Path("shard")), expected)
    assert dense.sentences(caption_ids[[7]], Path("shard")).tolist() == [1]


@pytest.mark.parametrize("unknown", [-1, 49_999_999, 12_346])
def test_unknown_ids_are_refused_on_both_paths(unknown):
    caption_ids = np.arange(0, 20_000, 2, dtype=np.int64) + 1  # odd ids only
    for lookup in lookups(caption_ids):
        with pytest.raises(UserError, match=f"shard: caption_id {unknown} is not in captions"):
            lookup.sentences(np.array([1, unknown, 3], np.int64), Path("shard"))


def test_ids_too_wide_or_negative_take_the_binary_search():
    wide = CaptionLookup(np.array([0, 10**12], np.int64), np.array([0, 1]), Path("captions"))
    negative = CaptionLookup(np.array([-5, 3], np.int64), np.array([0, 1]), Path("captions"))
    assert wide.table is None and negative.table is None
    assert wide.sentences(np.array([10**12, 0]), Path("s")).tolist() == [1, 0]
    assert negative.sentences(np.array([3, -5]), Path("s")).tolist() == [1, 0]
    with pytest.raises(UserError, match="no captions"):
        CaptionLookup(np.array([], np.int64), np.array([], np.int64), Path("c")).sentences(np.array([1]), Path("s"))


# --- funnel histograms ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(HISTOGRAM_EDGES))
def test_histograms_bin_as_numpy_does(name):
    """Every edge exactly, values beyond the range (clipped into the end bins), NaN (not counted), ints."""
    edges = HISTOGRAM_EDGES[name]
    rng = np.random.default_rng(1)
    spread = rng.uniform(edges[0] - 1, edges[-1] + 1, 50_000)
    values = np.concatenate(
        [edges, np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf), [-5.0, 500.0, np.nan], spread]
    )
    if name == "length":
        values = np.nan_to_num(values).astype(np.int32)
    kept = rng.random(len(values)) < 0.3
    before, after = histograms(values, edges, kept)

    def reference(x: np.ndarray) -> np.ndarray:
        x = x[~np.isnan(x)] if x.dtype.kind == "f" else x
        return np.histogram(np.clip(x, edges[0], edges[-1]), bins=edges)[0]

    np.testing.assert_array_equal(before, reference(values))
    np.testing.assert_array_equal(after, reference(values[kept]))
    assert histograms(values[:0], edges, kept[:0]).sum() == 0
