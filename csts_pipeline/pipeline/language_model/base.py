"""What every language model offers (`LanguageModel`), how it is chosen (`ModelSpec`), what it cost (`Cost`), and
the one rule that turns next-token probabilities into a distribution over answer options (`option_distribution`),
applied alike to a local model's logits and to a server's `top_logprobs`, so both give the same distribution."""

from __future__ import annotations

import math
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from csts_pipeline.pipeline.errors import UserError

TOP_K = 20  # next tokens read for the options: the most an OpenAI-compatible API returns (`top_logprobs`)
Messages = list[dict[str, str]]  # a chat: [{"role": "system"|"user"|"assistant", "content": ...}]


@dataclass
class ModelSpec:
    """The command line's choice: a local model (`model`: hub name, folder or .gguf file) or a server (`endpoint`,
    with `model` naming the served model, default the first it lists). The API key is read from the environment
    variable `api_key_env` and never recorded."""

    model: str | None = None
    endpoint: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    batch_size: int = 8
    samples: int = 10  # an endpoint without logprobs: answers sampled per question
    device: str = "auto"
    connect_timeout: float = 5.0

    def check(self) -> None:
        if self.model is None and self.endpoint is None:
            raise UserError("give --model NAME_OR_PATH (a local model) or --endpoint URL (an OpenAI-compatible server)")
        if self.batch_size < 1:
            raise UserError(f"--batch-size must be at least 1 (got {self.batch_size})")
        if self.samples < 1:
            raise UserError(f"--samples must be at least 1 (got {self.samples})")

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None


@dataclass
class Cost:
    """What the questions cost: requests (prompts), tokens in and out, seconds spent asking."""

    prompts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    started: float = field(default=0.0, repr=False)

    def add(self, prompts: int, prompt_tokens: int, completion_tokens: int) -> None:
        self.prompts += prompts
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens

    def timed(self) -> _Timer:
        return _Timer(self)

    def record(self) -> dict[str, Any]:
        found = asdict(self)
        found.pop("started")
        found["seconds"] = round(self.seconds, 3)
        return found


class _Timer:
    def __init__(self, cost: Cost):
        self.cost = cost

    def __enter__(self) -> None:
        self.begun = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.cost.seconds += time.perf_counter() - self.begun


def same_option(token: str, option: str) -> bool:
    """A next token stands for an option when it reads the same, spaces and case aside ("Yes", " yes", "yes")."""
    return token.strip().casefold() == option.strip().casefold()


def option_distribution(top: Iterable[tuple[str, float]], options: Sequence[str]) -> np.ndarray | None:
    """P(option) from (token text, logprob) pairs of the most likely next tokens: the mass of the tokens that read
    as each option, renormalised over the options; None when no option is among them."""
    mass = np.zeros(len(options), np.float64)
    for token, logprob in top:
        for index, option in enumerate(options):
            if same_option(token, option):
                mass[index] += math.exp(logprob)
    total = mass.sum()
    return mass / total if total > 0 else None


class LanguageModel(ABC):
    """A model that answers chats: as a distribution over answer options, or as text."""

    name: str  # short, for worker ids (`model:<name>`)
    cost: Cost

    @property
    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """What identifies the answers: the model id and its revision or file hash (cache key, record)."""

    @abstractmethod
    def option_probs(self, chats: list[Messages], options: Sequence[str]) -> list[np.ndarray]:
        """Per chat, P(each option) as the first token of the answer (sums to 1)."""

    @abstractmethod
    def generate(self, prompts: list[Messages | str], max_tokens: int) -> list[str]:
        """Greedy answers: a chat through the chat template, a string as raw text to continue."""

    def decoding(self) -> dict[str, Any]:
        """The decoding settings, for the record."""
        return {"options_from": f"next-token probabilities, top {TOP_K}", "generation": "greedy"}
