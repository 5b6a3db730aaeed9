"""A language model that answers `annotate rate`'s two questions with chosen distributions, so a simulated
model (simulate_models.py) reaches the ratings import through the step the CLI runs (`model_ratings.rate`: its
prompts, cache, record and rows), not through arrays built by hand.

Each item's chats are built with the very prompts `rate` loads; the model looks its answer up by the chat."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from csts_pipeline.pipeline.language_model import Cost, LanguageModel, load_prompt
from csts_pipeline.pipeline.language_model.base import Answer
from csts_pipeline.pipeline.records import fingerprint
from csts_pipeline.stages.annotate.steps.model_ratings import ITEM_FIELDS, QUESTIONS, rate


class ChosenAnswers(LanguageModel):
    """Answers per (sentence1, sentence2, condition): q over 1-5 for `rate_v1`, [1 - p, p] for `pertinent_v1`."""

    def __init__(self, name: str, answers: dict[tuple[str, str, str], tuple[np.ndarray, float]]):
        self.name = name
        self.cost = Cost()
        prompts = {question: load_prompt("csts_pipeline.stages.annotate", question) for question in QUESTIONS}
        self._by_chat: dict[str, list[float]] = {}
        for key, (q, p_flag) in answers.items():
            fields = dict(zip(ITEM_FIELDS, key))
            self._by_chat[self._key(prompts["rate"].chat(**fields))] = [float(v) for v in q]
            self._by_chat[self._key(prompts["pertinent"].chat(**fields))] = [1 - float(p_flag), float(p_flag)]
        self._identity = {"kind": "chosen", "name": name, "answers": fingerprint(sorted(self._by_chat.items()))}

    @staticmethod
    def _key(chat: Any) -> str:
        return json.dumps(chat, sort_keys=True)

    @property
    def identity(self) -> dict[str, Any]:
        return self._identity

    def option_probs(self, chats: list[Any], options: Sequence[str]) -> list[Answer]:
        """Each chat's chosen distribution, as a next-token reading with all its mass on the options."""
        self.cost.add(len(chats), 0, 0)
        return [Answer(np.asarray(self._by_chat[self._key(chat)]), "logprobs", 1.0) for chat in chats]

    def generate(self, prompts: list[Any], max_tokens: int) -> list[str]:
        raise NotImplementedError("chosen answers are distributions over options only")


def rate_with(annotate_dir: Path, name: str, answers: dict[str, tuple[np.ndarray, float]]) -> dict[str, Any]:
    """`annotate rate` with a model answering `answers` (item id -> (q, P(not pertinent))) on the folder's items."""
    triplets = pq.read_table(annotate_dir / "conditions" / "conditions.parquet").to_pylist()
    by_text = {tuple(t[f] for f in ITEM_FIELDS): answers[t["item_id"]] for t in triplets}
    return rate(annotate_dir, ChosenAnswers(name, by_text), force=True)
