"""What every language model offers (`LanguageModel`), what it cost (`Cost`), and the rules that read an answer
(`Answer`): from next-token probabilities (`read_logprobs`, applied alike to a local model's logits and to a
server's `top_logprobs`, so both give the same distribution) or from sampled replies (`read_samples`). An answer
is a real distribution or no answer: too little mass on the options, logprobs that are not log-probabilities, or
too few readable samples give `probs=None`, never a made-up distribution. How a model is chosen is
pipeline/model_spec.py (`ModelSpec`)."""

from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from csts_pipeline.pipeline.errors import UserError

TOP_K = 20  # next tokens read for the options: the most an OpenAI-compatible API returns (`top_logprobs`)
MIN_OPTION_MASS = 0.1  # logprobs: less of the next token's probability than this on the options: no answer
MIN_READABLE_SHARE = 0.5  # samples: fewer readable replies than this share of those asked for, no answer
LOGPROB_SLACK = 1e-6  # a logprob above this, or top-20 probabilities summing above 1 + this, is out of range
Messages = list[dict[str, str]]  # a chat: [{"role": "system"|"user"|"assistant", "content": ...}]


class Unfinished(UserError):
    """Questions that stopped for good (the run's deadline passed, a request failed) after some came back: the
    one-line error, and `done`, the index of each prompt that came back -> what came back (a server's reply, or
    an `Answer`), so that a step keeps what it paid for instead of asking it again."""

    def __init__(self, message: str, done: dict[int, Any]):
        super().__init__(message)
        self.done = done


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


@dataclass(frozen=True)
class Answer:
    """One question's answer and how it was read: `probs` P(each option) (None: no answer, `missing` says why),
    `read_mode` logprobs or samples, `option_mass` the share of the next token's probability (logprobs) or of the
    samples asked for (samples) that fell on the options, and for samples how many were asked for and readable."""

    probs: np.ndarray | None
    read_mode: str
    option_mass: float | None
    samples_asked: int | None = None
    samples_readable: int | None = None
    missing: str | None = None  # low_mass, bad_logprobs, no_logprobs, few_readable
    system_fingerprint: str | None = None

    def row(self) -> dict[str, Any]:
        """The answer as the cache keeps it."""
        found = asdict(self)
        found["probs"] = None if self.probs is None else [float(p) for p in self.probs]
        return found

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Answer:
        probs = row.get("probs")
        known: dict[str, Any] = {name: row.get(name) for name in cls.__dataclass_fields__ if name != "probs"}
        return cls(probs=None if probs is None else np.asarray(probs, np.float64), **known)


def read_logprobs(top: Iterable[tuple[str, float]], options: Sequence[str]) -> Answer:
    """P(option) from (token text, logprob) pairs of the most likely next tokens: the mass of the tokens that read
    as each option, renormalised over the options; no answer when that mass is below MIN_OPTION_MASS, or when a
    logprob is not a finite number <= 0 (or the probabilities sum above 1)."""
    pairs = list(top)
    values = np.array([value for _, value in pairs], np.float64)
    if not np.all(np.isfinite(values)) or np.any(values > LOGPROB_SLACK):
        return Answer(None, "logprobs", None, missing="bad_logprobs")
    probs = np.exp(np.minimum(values, 0.0))
    if probs.sum() > 1 + LOGPROB_SLACK:
        return Answer(None, "logprobs", None, missing="bad_logprobs")
    mass = np.zeros(len(options), np.float64)
    for (token, _), p in zip(pairs, probs):
        for index, option in enumerate(options):
            if same_option(token, option):
                mass[index] += p
    total = float(mass.sum())
    if total < MIN_OPTION_MASS:
        return Answer(None, "logprobs", round(total, 9), missing="low_mass")
    return Answer(mass / total, "logprobs", round(total, 9))


def read_option(text: str, options: Sequence[str]) -> int | None:
    """The option a free-text reply names as a word ("4", "Rating: 4", "Yes, it does"); None when it names none
    ("Sure! The answer") or more than one ("3 or 4")."""
    value = text.casefold()
    named = {i for i, option in enumerate(options) if re.search(rf"\b{re.escape(option.casefold())}\b", value)}
    return named.pop() if len(named) == 1 else None


def read_samples(texts: Sequence[str], options: Sequence[str], asked: int) -> Answer:
    """The shares of the readable replies among `asked` samples; no answer when fewer than MIN_READABLE_SHARE of
    those asked for are readable (a chatty reply, or a server that ignores `n` and sends one)."""
    counts = np.zeros(len(options), np.float64)
    for text in texts:
        index = read_option(text, options)
        if index is not None:
            counts[index] += 1
    readable = int(counts.sum())
    share = round(readable / asked, 9)
    if readable == 0 or readable < MIN_READABLE_SHARE * asked:
        return Answer(None, "samples", share, asked, readable, missing="few_readable")
    return Answer(counts / readable, "samples", share, asked, readable)


def option_distribution(top: Iterable[tuple[str, float]], options: Sequence[str]) -> np.ndarray | None:
    """P(option) by `read_logprobs`'s rule; None when it gives no answer."""
    return read_logprobs(top, options).probs


def reading() -> dict[str, Any]:
    """The reading rule's constants, in every model's identity: changing one never reuses answers read by another."""
    return {"top_logprobs": TOP_K, "min_option_mass": MIN_OPTION_MASS, "min_readable_share": MIN_READABLE_SHARE}


class LanguageModel(ABC):
    """A model that answers chats: as a distribution over answer options, or as text."""

    name: str  # short, for worker ids (`model:<name>`)
    cost: Cost

    @property
    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """What identifies the answers: the model id and its revision or file hash (cache key, record)."""

    @abstractmethod
    def option_probs(self, chats: list[Messages], options: Sequence[str]) -> list[Answer]:
        """Per chat, the answer: P(each option) as the first token of the reply (sums to 1), or no answer."""

    @abstractmethod
    def generate(self, prompts: list[Messages | str], max_tokens: int) -> list[str]:
        """Greedy answers: a chat through the chat template, a string as raw text to continue."""

    def decoding(self) -> dict[str, Any]:
        """The decoding settings, for the record."""
        return {"options_from": f"next-token probabilities, top {TOP_K}", "generation": "greedy", **reading()}
