"""Throughput of the filter's metric and threshold part against a plain-Python reference, on the same pairs.

Pairs are drawn as the mine stage draws them, from real COCO captions: every image gets its k nearest images
(here by the TF-IDF cosine of its captions, as there are no image files), pairs are made unordered, and each image
pair becomes the Cartesian product of the two images' captions (stages.mine.image_pairs / expand). Sentence
embeddings are precomputed for both sides and not timed: random unit vectors of SimCSE-large's width by default
(their values do not change the work), or `--embeddings minilm` for real ones.

Timed, vectorised: caption id -> sentence row, the cheap metrics for every pair, the cosine for the pairs that pass
them, the decisions (what the stage does per chunk, without Parquet I/O). Timed, reference: a per-pair loop that
computes every criterion from the two strings (tokenise, drop stopwords, set IoU, word and character counts,
cosine from the cached embeddings) and applies the thresholds. The last line reads
`pairs_per_s=<float> reference_pairs_per_s=<float> ratio=<float>`.

    python bench/filter/metrics.py [--pairs 1000000] [--k 64] [--dataset coco]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from csts_pipeline.pipeline.manifest import load_manifest
from csts_pipeline.stages.filter.criteria import CRITERIA, Criteria, reference_pair_metrics, score_pairs
from csts_pipeline.stages.filter.lookup import CaptionLookup
from csts_pipeline.stages.filter.metrics import NumbaPairMetrics, TextFeatures
from csts_pipeline.stages.filter.text import bag_of_words
from csts_pipeline.stages.mine.pairs import CaptionIndex, expand, image_pairs

REPO = Path(__file__).resolve().parents[2]
CAPTIONS = REPO.parent / "shared" / "data" / "coco" / "captions_val2017.json"
SOURCE = Path("captions")  # named in the lookup's errors only


def text_neighbours(image_ids: np.ndarray, texts_by_image: dict[int, list[str]], k: int):
    """Each image's k nearest images by the TF-IDF cosine of its pooled captions (a stand-in for CLIP)."""
    vocabulary: dict[str, int] = {}
    rows, cols = [], []
    for row, image_id in enumerate(image_ids):
        for caption in texts_by_image[image_id]:
            for word in bag_of_words(caption):
                rows.append(row)
                cols.append(vocabulary.setdefault(word, len(vocabulary)))
    counts = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(image_ids), len(vocabulary)))
    idf = np.log(len(image_ids) / (1 + np.asarray((counts > 0).sum(0)).ravel())) + 1
    weighted = counts @ sp.diags(idf)
    norms = np.sqrt(np.asarray(weighted.multiply(weighted).sum(1)).ravel())
    weighted = sp.diags(1 / np.maximum(norms, 1e-12)) @ weighted
    similarity = (weighted @ weighted.T).toarray().astype(np.float32)
    np.fill_diagonal(similarity, -np.inf)
    neighbours = np.argsort(-similarity, axis=1)[:, :k]
    return neighbours, np.take_along_axis(similarity, neighbours, axis=1)


def draw_pairs(k: int):
    """(caption_ids, texts, candidates table) drawn as the mine stage would."""
    annotations = json.loads(CAPTIONS.read_text())["annotations"]
    texts_by_image: dict[int, list[str]] = defaultdict(list)
    for annotation in annotations:
        texts_by_image[annotation["image_id"]].append(annotation["caption"].strip())
    image_ids = np.array(sorted(texts_by_image), np.int64)
    neighbours, scores = text_neighbours(image_ids, texts_by_image, k)
    pairs = image_pairs(image_ids, neighbours, scores, "unordered")
    caption_ids = np.array([a["id"] for a in annotations], np.int64)
    owners = np.array([a["image_id"] for a in annotations], np.int64)
    candidates = expand(pairs, CaptionIndex.build(image_ids, caption_ids, owners))
    return caption_ids, [a["caption"].strip() for a in annotations], candidates


def embed(texts: list[str], kind: str, dim: int) -> np.ndarray:
    if kind == "minilm":
        import torch

        from csts_pipeline.stages.filter.text import encode_texts, load_text_encoder

        return encode_texts(load_text_encoder("packaged:all-MiniLM-L6-v2", "model", torch.device("cpu")), texts, 128)
    vectors = np.random.default_rng(0).standard_normal((len(texts), dim), dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def vectorised(caption_ids_1, caption_ids_2, lookup, backend, criteria, full_report, chunk) -> Counter:
    """The stage's per-chunk work: ids -> sentence rows, metrics, decisions. Counts pairs by first failure."""
    codes = np.zeros(len(CRITERIA) + 1, np.int64)
    for lo in range(0, len(caption_ids_1), chunk):
        first = lookup.sentences(caption_ids_1[lo : lo + chunk], SOURCE)
        second = lookup.sentences(caption_ids_2[lo : lo + chunk], SOURCE)
        scored = score_pairs(backend, criteria, first, second, full_report)
        codes += np.bincount(scored.first_failed + 1, minlength=len(codes))
    return Counter({name: int(count) for name, count in zip((None, *CRITERIA), codes) if count})


def reference(caption_ids_1, caption_ids_2, text_of, embedding_of, criteria) -> Counter:
    """A straightforward implementation: one pair at a time, every criterion from the two strings."""
    outcomes: Counter = Counter()
    for id_1, id_2 in zip(caption_ids_1.tolist(), caption_ids_2.tolist()):
        metrics = reference_pair_metrics(text_of[id_1], text_of[id_2], embedding_of[id_1], embedding_of[id_2])
        outcomes[criteria.first_failed(metrics)] += 1
    return outcomes


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def median_time(repeats: int, work) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1_000_000, help="candidate pairs timed (both paths)")
    parser.add_argument("--k", type=int, default=64, help="neighbours per image, as mine.k")
    parser.add_argument("--dataset", default="coco", help="whose thresholds: manifests/NAME.yaml")
    parser.add_argument("--embeddings", choices=["random", "minilm"], default="random")
    parser.add_argument("--dim", type=int, default=1024, help="width of the random embeddings")
    parser.add_argument("--repeats", type=int, default=5, help="vectorised runs; the median is reported")
    args = parser.parse_args()
    if not CAPTIONS.is_file():
        sys.exit(f"shared data missing: {CAPTIONS}")

    config = load_manifest(REPO / "manifests" / f"{args.dataset}.yaml").filter
    criteria = Criteria.from_config(config)
    caption_ids, texts, candidates = draw_pairs(args.k)
    n = min(args.pairs, candidates.num_rows)
    ids_1 = candidates.column("caption_id_1").to_numpy()[:n]
    ids_2 = candidates.column("caption_id_2").to_numpy()[:n]

    started = time.perf_counter()
    rows: dict[str, int] = {}
    sentence_of_caption = np.fromiter((rows.setdefault(t, len(rows)) for t in texts), np.int64, len(texts))
    sentences = list(rows)
    features = TextFeatures.build(sentences)
    lookup = CaptionLookup(caption_ids, sentence_of_caption, SOURCE)
    features_seconds = time.perf_counter() - started

    embeddings = embed(sentences, args.embeddings, args.dim)
    backend = NumbaPairMetrics(features, embeddings)
    vectorised(ids_1[:1000], ids_2[:1000], lookup, backend, criteria, False, config.pairs_per_chunk)  # compile

    def run(full: bool):
        return vectorised(ids_1, ids_2, lookup, backend, criteria, full, config.pairs_per_chunk)

    seconds, outcomes = median_time(args.repeats, lambda: run(False))
    full_seconds, _ = median_time(args.repeats, lambda: run(True))
    text_of = dict(zip(caption_ids.tolist(), texts))
    as64 = embeddings.astype(np.float64)
    embedding_of = {cid: as64[row] for cid, row in zip(caption_ids.tolist(), sentence_of_caption.tolist())}
    reference_seconds, expected = median_time(1, lambda: reference(ids_1, ids_2, text_of, embedding_of, criteria))
    if expected != outcomes:
        sys.exit(f"vectorised and reference decide differently: {dict(outcomes)} vs {dict(expected)}")

    rate, reference_rate = n / seconds, n / reference_seconds
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPU cores (numba uses all; the reference one)")
    print(f"captions: {len(texts):,} ({len(sentences):,} distinct), k={args.k}, {candidates.num_rows:,} candidates")
    print(f"pairs timed: {n:,}; thresholds: {args.dataset} ({', '.join(criteria.rule(c) for c in CRITERIA)})")
    print(f"embeddings: {args.embeddings}, dim {embeddings.shape[1]} (precomputed, not timed)")
    funnel = ", ".join(f"{name} {outcomes[name]:,}" for name in CRITERIA)
    print(f"decisions identical on both paths: kept {outcomes[None]:,}; first failed: {funnel}")
    print(f"caption features (once per caption, not in the rates): {features_seconds:.2f}s")
    print(f"vectorised (cosine on survivors): {seconds:.3f}s  {rate:,.0f} pairs/s")
    print(f"vectorised --full-report (cosine on all): {full_seconds:.3f}s  {n / full_seconds:,.0f} pairs/s")
    print(f"reference (per-pair Python): {reference_seconds:.1f}s  {reference_rate:,.0f} pairs/s")
    with_features = n / (seconds + features_seconds)
    print(f"vectorised plus the caption features: {with_features:,.0f} pairs/s ({with_features / reference_rate:.1f}x)")
    print(f"pairs_per_s={rate:.1f} reference_pairs_per_s={reference_rate:.1f} ratio={rate / reference_rate:.1f}")


if __name__ == "__main__":
    main()
