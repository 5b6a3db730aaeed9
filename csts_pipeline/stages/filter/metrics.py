"""Pair metrics, fast: a compiled numba kernel over arrays of sentence indices on the CPU, or torch in blocks on a
GPU (`pair_metrics_backend`). Per-sentence work happens once per unique sentence (`TextFeatures`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from csts_pipeline.stages.filter import kernels
from csts_pipeline.stages.filter.criteria import CRITERIA, PAD_ID, padded_edges
from csts_pipeline.stages.filter.text import bag_of_words, char_length, word_count


@dataclass
class TextFeatures:
    """Per-sentence features, row r for sentence r: its bag of words as sorted unique int32 ids in
    token_ids[token_offsets[r]:token_offsets[r + 1]] (CSR), its word count and its character length."""

    token_offsets: np.ndarray
    token_ids: np.ndarray
    words: np.ndarray
    chars: np.ndarray

    @classmethod
    def build(cls, texts: Sequence[str]) -> TextFeatures:
        """One pass over the sentences; ids number the words in order of first appearance."""
        vocabulary: dict[str, int] = {}
        ids: list[int] = []
        offsets = np.zeros(len(texts) + 1, np.int64)
        words = np.empty(len(texts), np.int32)
        chars = np.empty(len(texts), np.int32)
        for row, text in enumerate(texts):
            bag = {vocabulary.setdefault(word, len(vocabulary)) for word in bag_of_words(text)}
            ids.extend(sorted(bag))
            offsets[row + 1] = len(ids)
            words[row] = word_count(text)
            chars[row] = char_length(text)
        return cls(offsets, np.asarray(ids, np.int32), words, chars)

    def __len__(self) -> int:
        return len(self.words)

    def padded_token_ids(self) -> np.ndarray:
        """[n, longest bag] int32 rows, each sorted and padded with PAD_ID (for the torch path)."""
        counts = np.diff(self.token_offsets)
        width = max(1, int(counts.max(initial=0)))
        padded = np.full((len(self), width), PAD_ID, np.int32)
        rows = np.repeat(np.arange(len(self)), counts)
        columns = np.arange(len(self.token_ids)) - np.repeat(self.token_offsets[:-1], counts)
        padded[rows, columns] = self.token_ids
        return padded


_NO_EMBEDDINGS = np.zeros((1, 1), np.float32)
_NO_BOUNDS = np.full(4, -np.inf), np.full(4, np.inf)
_EDGES, _BINS = padded_edges()


class NumbaPairMetrics:
    """Pair metrics on the CPU: compiled, parallel over pairs, no per-pair Python (stages.filter.kernels)."""

    def __init__(self, features: TextFeatures, embeddings: np.ndarray | None):
        self.features = features
        self.vocabulary = int(features.token_ids.max(initial=-1)) + 1
        self.embeddings = None if embeddings is None else np.ascontiguousarray(embeddings, np.float32)

    def cheap(self, first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(iou, ratio) as float64 and length as int32 for pairs (first[p], second[p]) of sentence rows."""
        metrics, _, _ = self.fused(first, second, *_NO_BOUNDS, kernels.COSINE_OFF)
        return metrics["iou"], metrics["ratio"], metrics["length"]

    def fused(
        self, first: np.ndarray, second: np.ndarray, low: np.ndarray, high: np.ndarray, cosine_mode: int
    ) -> tuple[dict[str, np.ndarray], np.ndarray, dict[str, np.ndarray]]:
        """Every metric (the cosine NaN where not computed), the failed-criteria bits and the histogram counts
        (criteria.ScoredPairs) of every pair in one compiled pass (`kernels.fused_kernel`); low/high bound
        CRITERIA in order, +-inf where off."""
        n = len(first)
        iou, ratio, cosine = np.empty(n), np.empty(n), np.empty(n)
        length, bits = np.empty(n, np.int32), np.empty(n, np.uint8)
        counts = np.zeros((kernels.fused_blocks(n), len(CRITERIA), 2, _EDGES.shape[1] - 1), np.int64)
        embeddings = self.embeddings if self.embeddings is not None and cosine_mode else _NO_EMBEDDINGS
        f = self.features
        kernels.fused_kernel(
            first=np.asarray(first, np.int64), second=np.asarray(second, np.int64), offsets=f.token_offsets,
            ids=f.token_ids, vocabulary=self.vocabulary, words=f.words, chars=f.chars, embeddings=embeddings,
            low=np.asarray(low, np.float64), high=np.asarray(high, np.float64), cosine_mode=cosine_mode,
            edges=_EDGES, bins=_BINS, iou=iou, ratio=ratio, length=length, cosine=cosine, bits=bits, counts=counts,
        )  # fmt: skip
        total = counts.sum(axis=0)
        histograms = {name: total[code, :, : _BINS[code]] for code, name in enumerate(CRITERIA)}
        return {"length": length, "ratio": ratio, "iou": iou, "simcse_cosine": cosine}, bits, histograms

    def cosine(self, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        """Dot products of the unit embeddings, accumulated in float64."""
        out = np.empty(len(first))
        kernels.cosine_kernel(np.asarray(first, np.int64), np.asarray(second, np.int64), self.embeddings, out)
        return out


class TorchPairMetrics:
    """The same metrics with torch, in blocks, on any device (used on CUDA): token-id rows padded to one width,
    intersections by batched searchsorted, cosines as blocked row-wise products in float64."""

    def __init__(
        self,
        features: TextFeatures,
        embeddings: np.ndarray | None,
        device,
        block: int = 1 << 20,
        cosine_block: int = 1 << 15,
    ):
        import torch

        self.torch, self.device, self.block, self.cosine_block = torch, device, block, cosine_block
        self.tokens = torch.from_numpy(features.padded_token_ids()).to(device)
        self.bag_sizes = torch.from_numpy(np.diff(features.token_offsets)).to(device)
        self.words = torch.from_numpy(features.words.astype(np.int64)).to(device)
        self.chars = torch.from_numpy(features.chars).to(device)
        self.embeddings = None if embeddings is None else torch.from_numpy(np.asarray(embeddings, np.float32))
        if self.embeddings is not None:
            self.embeddings = self.embeddings.to(device)

    def _blocks(self, first: np.ndarray, second: np.ndarray, size: int):
        """Pairs in blocks of `size`, as index tensors on the device: memory stays bounded by the block."""
        torch = self.torch
        for lo in range(0, len(first), size):
            a = torch.from_numpy(np.asarray(first[lo : lo + size], np.int64)).to(self.device)
            b = torch.from_numpy(np.asarray(second[lo : lo + size], np.int64)).to(self.device)
            yield slice(lo, lo + len(a)), a, b

    def cheap(self, first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        torch = self.torch
        n = len(first)
        iou, ratio, length = np.empty(n), np.empty(n), np.empty(n, np.int32)
        width = self.tokens.shape[1]
        for rows, a, b in self._blocks(first, second, self.block):
            bag_a, bag_b = self.tokens[a], self.tokens[b]
            found = bag_b.gather(1, torch.searchsorted(bag_b, bag_a).clamp_max(width - 1))
            common = ((found == bag_a) & (bag_a != PAD_ID)).sum(1)
            union = self.bag_sizes[a] + self.bag_sizes[b] - common
            iou[rows] = torch.where(union > 0, common.double() / union.clamp_min(1).double(), 0.0).cpu().numpy()
            shorter = torch.minimum(self.words[a], self.words[b]).double()
            longer = torch.maximum(self.words[a], self.words[b]).double()
            ratio[rows] = torch.where(longer > 0, shorter / longer.clamp_min(1), 0.0).cpu().numpy()
            length[rows] = torch.minimum(self.chars[a], self.chars[b]).cpu().numpy()
        return iou, ratio, length

    def cosine(self, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        out = np.empty(len(first))
        for rows, a, b in self._blocks(first, second, self.cosine_block):
            products = self.embeddings[a].double() * self.embeddings[b].double()
            out[rows] = products.sum(1).cpu().numpy()
        return out


def pair_metrics_backend(
    features: TextFeatures, embeddings: np.ndarray | None, device
) -> NumbaPairMetrics | TorchPairMetrics:
    """torch on a CUDA device, the numba kernels otherwise."""
    if getattr(device, "type", str(device)) == "cuda":
        return TorchPairMetrics(features, embeddings, device)
    return NumbaPairMetrics(features, embeddings)
