"""Sentence-level text processing shared by the stages: the bag of words of the filter criteria (NLTK's English
stopwords, read from the vendored copy) and the sentence encoder (pipeline.text_encoder, re-exported here).
"""

from __future__ import annotations

import functools
import logging
import re
import unicodedata
from pathlib import Path

from csts_pipeline.pipeline.text_encoder import encode_texts, load_text_encoder  # noqa: F401  (their home before mine used them)

log = logging.getLogger(__name__)

NLTK_DATA = Path(__file__).resolve().parent / "resources" / "nltk_data"

# A word is a run of letters, digits and apostrophes; apostrophes at either end are quote marks, not part of it.
_WORD = re.compile(r"(?:[^\W_]|')+")
_CURLY_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'"})


@functools.cache
def stopwords() -> frozenset[str]:
    """NLTK's English stopword list, through `nltk.corpus` with nltk.data.path pointed at the vendored copy."""
    import nltk
    from nltk.corpus import stopwords as corpus

    if str(NLTK_DATA) not in nltk.data.path:
        nltk.data.path.insert(0, str(NLTK_DATA))
    return frozenset(corpus.words("english"))


def bag_of_words(text: str) -> list[str]:
    """Lowercased words of `text` without stopwords, in order (duplicates kept; callers take the set)."""
    normalised = unicodedata.normalize("NFC", text).lower().translate(_CURLY_APOSTROPHES)
    drop = stopwords()
    words = (match.strip("'") for match in _WORD.findall(normalised))
    return [word for word in words if word and word not in drop]


def word_count(text: str) -> int:
    """Words split on whitespace, as the length-ratio criterion counts them."""
    return len(text.split())


def char_length(text: str) -> int:
    """Characters after stripping surrounding whitespace, as the length criterion counts them."""
    return len(text.strip())
