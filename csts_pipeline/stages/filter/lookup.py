"""caption_id -> its distinct sentence, for every pair of a shard.

Caption ids are usually small non-negative integers (COCO annotation ids, Flickr30K's numbering, the embed stage's
own), so a dense table indexed by id answers a million look-ups in a few milliseconds, where a binary search over
the sorted ids took ~25 ms per column. Ids spread too widely for a table fall back to the binary search.
"""

from __future__ import annotations

from pathlib import Path

import numba
import numpy as np

from csts_pipeline.pipeline.errors import UserError

DENSE_SLACK = 8  # a dense table may hold up to this many entries per caption (plus DENSE_MIN) before it is refused
DENSE_MIN = 1 << 20


@numba.njit(parallel=True, cache=True)
def _dense_sentences(ids, table, sentences):  # pragma: no cover - compiled
    """sentences[p] = table[ids[p]] (-1 for an unknown id); returns the unknown count."""
    unknown = 0
    for p in numba.prange(ids.size):
        caption = ids[p]
        sentence = table[caption] if 0 <= caption < table.size else -1
        sentences[p] = sentence
        unknown += sentence < 0
    return unknown


class CaptionLookup:
    """The distinct sentence (its row in the filter's sentence list) of caption ids; unknown ids are a user error.
    Caption text and sentence text are the same string, so the pair pass needs nothing else per pair."""

    def __init__(self, caption_ids: np.ndarray, sentence_of_row: np.ndarray, source: Path):
        caption_ids = np.asarray(caption_ids, np.int64)
        self.source = source
        order = np.argsort(caption_ids, kind="stable")
        self.sorted_ids = caption_ids[order]
        self.sorted_sentences = np.asarray(sentence_of_row, np.int64)[order]
        self.table: np.ndarray | None = None
        if len(caption_ids) and caption_ids.min() >= 0:
            size = int(caption_ids.max()) + 1
            if size <= DENSE_SLACK * len(caption_ids) + DENSE_MIN:
                self.table = np.full(size, -1, np.int64)
                self.table[self.sorted_ids[::-1]] = self.sorted_sentences[::-1]  # the first row of an id wins

    def sentences(self, caption_ids: np.ndarray, shard: Path) -> np.ndarray:
        """Sentence rows of `caption_ids`, found in the captions table of `self.source`."""
        if not len(self.sorted_ids):
            raise UserError(f"{self.source}: no captions")
        caption_ids = np.asarray(caption_ids, np.int64)
        if self.table is not None:
            sentences = np.empty(len(caption_ids), np.int64)
            if _dense_sentences(caption_ids, self.table, sentences):
                self._refuse(sentences < 0, caption_ids, shard)
            return sentences
        position = np.searchsorted(self.sorted_ids, caption_ids).clip(max=len(self.sorted_ids) - 1)
        unknown = self.sorted_ids[position] != caption_ids
        if unknown.any():
            self._refuse(unknown, caption_ids, shard)
        return self.sorted_sentences[position]

    def _refuse(self, unknown: np.ndarray, caption_ids: np.ndarray, shard: Path) -> None:
        raise UserError(
            f"{shard}: caption_id {int(caption_ids[unknown][0])} is not in {self.source} "
            f"({int(unknown.sum())} such pairs); rerun `csts-pipeline mine`"
        )
