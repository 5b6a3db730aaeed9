"""The sentence-pair criteria of the C-STS filter (Deshpande et al. 2023, App. A.2, Table 6), computed fast.

Per-sentence work happens once per unique sentence (`TextFeatures`: bag-of-words ids, word count, character
length; embeddings come from stages.filter.text). Pair work is a compiled numba kernel over arrays of sentence indices
on the CPU, or torch in blocks on a GPU (`pair_metrics_backend`). `Criteria` is the one place that knows the
thresholds: which criteria are on, their bounds, pass/fail, and the cheapest-first order. `score_pairs` computes
the cheap metrics for every pair and the cosine only for the pairs that pass them (or for all, for a full report).
`reference_pair_metrics` is the definition written plainly, one pair at a time: the oracle of the tests and the
baseline of bench/filter.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numba
import numpy as np

from pipeline.manifest import FilterConfig
from stages.filter.text import bag_of_words, char_length, word_count

# Cheapest first: the order in which the funnel applies them and in which `failed` names the first violation.
CRITERIA = ("length", "ratio", "iou", "simcse_cosine")
CHEAP_CRITERIA = CRITERIA[:-1]
PAD_ID = np.iinfo(np.int32).max  # pads token-id rows for torch; above every real id, so rows stay sorted


@dataclass(frozen=True)
class Criteria:
    """Thresholds; None switches a bound off. A criterion is on when it has a bound."""

    min_length: int | None = None
    min_ratio: float | None = None
    max_iou: float | None = None
    min_cosine: float | None = None
    max_cosine: float | None = None

    @classmethod
    def from_config(cls, config: FilterConfig) -> Criteria:
        return cls(
            min_length=config.min_length,
            min_ratio=config.min_ratio,
            max_iou=config.max_iou,
            min_cosine=config.min_cosine,
            max_cosine=config.max_cosine,
        )

    def bounds(self, name: str) -> tuple[float | None, float | None]:
        """(minimum, maximum) allowed for criterion `name`; both inclusive."""
        return {
            "length": (self.min_length, None),
            "ratio": (self.min_ratio, None),
            "iou": (None, self.max_iou),
            "simcse_cosine": (self.min_cosine, self.max_cosine),
        }[name]

    def active(self) -> tuple[str, ...]:
        return tuple(name for name in CRITERIA if self.bounds(name) != (None, None))

    @property
    def needs_encoder(self) -> bool:
        return "simcse_cosine" in self.active()

    def rule(self, name: str) -> str:
        low, high = self.bounds(name)
        if low is not None and high is not None:
            return f"{low} <= {name} <= {high}"
        if low is not None:
            return f"{name} >= {low}"
        return f"{name} <= {high}" if high is not None else "off"

    def fails(self, name: str, values):
        """True where `values` (a number or an array) break the criterion's bounds. NaN (a cosine that was not
        computed) never fails."""
        low, high = self.bounds(name)
        failed = np.zeros(np.shape(values), bool) if np.ndim(values) else False
        if low is not None:
            failed = failed | (values < low)
        if high is not None:
            failed = failed | (values > high)
        return failed

    def first_failed(self, metrics: Mapping[str, float]) -> str | None:
        """The first criterion, cheapest first, that one pair's metrics break; None when the pair is kept."""
        return next((name for name in self.active() if self.fails(name, metrics[name])), None)

    def as_params(self) -> dict[str, float | int | None]:
        return {
            "min_length": self.min_length,
            "min_ratio": self.min_ratio,
            "max_iou": self.max_iou,
            "min_cosine": self.min_cosine,
            "max_cosine": self.max_cosine,
        }


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


@numba.njit(parallel=True, cache=True)
def _cheap_kernel(first, second, offsets, ids, words, chars, iou, ratio, length):  # pragma: no cover - compiled
    for p in numba.prange(first.size):
        a, b = first[p], second[p]
        i, i_end, j, j_end = offsets[a], offsets[a + 1], offsets[b], offsets[b + 1]
        common = 0
        while i < i_end and j < j_end:  # merge of two sorted id lists
            if ids[i] == ids[j]:
                common += 1
                i += 1
                j += 1
            elif ids[i] < ids[j]:
                i += 1
            else:
                j += 1
        union = (offsets[a + 1] - offsets[a]) + (offsets[b + 1] - offsets[b]) - common
        iou[p] = common / union if union > 0 else 0.0
        shorter, longer = min(words[a], words[b]), max(words[a], words[b])
        ratio[p] = shorter / longer if longer > 0 else 0.0
        length[p] = min(chars[a], chars[b])


@numba.njit(parallel=True, fastmath={"reassoc", "contract"}, cache=True)
def _cosine_kernel(first, second, embeddings, out):  # pragma: no cover - compiled
    for p in numba.prange(first.size):
        x, y = embeddings[first[p]], embeddings[second[p]]
        total = 0.0
        for d in range(x.size):
            total += np.float64(x[d]) * np.float64(y[d])
        out[p] = total


class NumbaPairMetrics:
    """Pair metrics on the CPU: compiled, parallel over pairs, no per-pair Python."""

    def __init__(self, features: TextFeatures, embeddings: np.ndarray | None):
        self.features = features
        self.embeddings = None if embeddings is None else np.ascontiguousarray(embeddings, np.float32)

    def cheap(self, first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(iou, ratio) as float64 and length as int32 for pairs (first[p], second[p]) of sentence rows."""
        n = len(first)
        iou, ratio, length = np.empty(n), np.empty(n), np.empty(n, np.int32)
        f = self.features
        _cheap_kernel(
            np.asarray(first, np.int64), np.asarray(second, np.int64), f.token_offsets, f.token_ids, f.words,
            f.chars, iou, ratio, length,
        )  # fmt: skip
        return iou, ratio, length

    def cosine(self, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        """Dot products of the unit embeddings, accumulated in float64."""
        out = np.empty(len(first))
        _cosine_kernel(np.asarray(first, np.int64), np.asarray(second, np.int64), self.embeddings, out)
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


@dataclass
class ScoredPairs:
    """Metrics and decisions for a batch of pairs. `simcse_cosine` is NaN where it was not computed (criterion
    off, or the pair failed a cheaper criterion first); `first_failed` indexes CRITERIA, -1 for a kept pair."""

    metrics: dict[str, np.ndarray]
    failed: dict[str, np.ndarray]
    first_failed: np.ndarray
    cosine_computed: np.ndarray

    @property
    def kept(self) -> np.ndarray:
        return self.first_failed < 0

    def __len__(self) -> int:
        return len(self.first_failed)


def score_pairs(
    backend: NumbaPairMetrics | TorchPairMetrics,
    criteria: Criteria,
    first: np.ndarray,
    second: np.ndarray,
    cosine_for_all: bool = False,
) -> ScoredPairs:
    """Cheap metrics on every pair, then the cosine where it is needed: on the pairs that passed the cheap
    criteria, or on every pair when `cosine_for_all` (exact funnel figures for the cosine)."""
    iou, ratio, length = backend.cheap(first, second)
    metrics = {"length": length, "ratio": ratio, "iou": iou}
    active = criteria.active()
    failed = {name: criteria.fails(name, metrics[name]) for name in CHEAP_CRITERIA if name in active}
    cosine = np.full(len(first), np.nan)
    computed = np.zeros(len(first), bool)
    if criteria.needs_encoder:
        computed = np.ones(len(first), bool)
        if not cosine_for_all:
            for mask in failed.values():
                computed &= ~mask
        todo = np.flatnonzero(computed)
        cosine[todo] = backend.cosine(first[todo], second[todo])
        failed["simcse_cosine"] = criteria.fails("simcse_cosine", cosine)
    metrics["simcse_cosine"] = cosine
    first_failed = np.full(len(first), -1, np.int8)
    for code in reversed(range(len(CRITERIA))):
        if CRITERIA[code] in failed:
            first_failed[failed[CRITERIA[code]]] = code
    return ScoredPairs(metrics, failed, first_failed, computed)


def reference_pair_metrics(
    sentence1: str, sentence2: str, embedding1: np.ndarray | None, embedding2: np.ndarray | None
) -> dict[str, float]:
    """Every criterion's metric for one pair, straight from the two strings (and float64 unit embeddings)."""
    bag1, bag2 = set(bag_of_words(sentence1)), set(bag_of_words(sentence2))
    union = len(bag1 | bag2)
    words1, words2 = word_count(sentence1), word_count(sentence2)
    return {
        "length": min(char_length(sentence1), char_length(sentence2)),
        "ratio": min(words1, words2) / max(words1, words2) if max(words1, words2) else 0.0,
        "iou": len(bag1 & bag2) / union if union else 0.0,
        "simcse_cosine": float(embedding1 @ embedding2) if embedding1 is not None else float("nan"),
    }
