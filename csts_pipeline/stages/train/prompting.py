"""Prompting baselines (the paper's Section 4.2, Tables 4 and 11): a generative model, causal or sequence-to-sequence,
local or behind an OpenAI-compatible server (pipeline.language_model), asked to rate each row 1-5.

The prompt: optional instructions (none, the paper's short one, or a long one read from a file), then 0, 2 or 4
examples, then the query, each laid out as `Input: Sentence 1: ... Sentence 2: ... Condition: ...` and
`Output: <label>`; the query ends with `Output:`. Examples come in contrasting twos, both conditions of one sentence
pair from the training file, never the query's own pair. At most 20 new tokens, greedy. The answer is parsed as the
paper does (non-numeric characters stripped, stray dots trimmed, cast to float: "The Answer is 2.0." -> 2.0); an
answer that does not parse is invalid and replaced by a draw from U[1, 5] (seeded); the invalid share is reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.language_model import LanguageModel, open_model
from csts_pipeline.pipeline.model_spec import ModelSpec
from csts_pipeline.stages.train.data import PairData, quad_pairs

SHORT_INSTRUCTIONS = (
    "On a scale between 1 and 5, how similar are the following two sentences with respect to the condition "
    "provided? Respond only with a score between 1 and 5."
)
INSTRUCTIONS = ("none", "short", "long")
SHOTS = (0, 2, 4)
MAX_NEW_TOKENS = 20


@dataclass
class PromptOptions:
    instructions: str = "short"
    instructions_file: Path | None = None  # the long instructions
    shots: int = 0
    examples: PairData | None = None  # the training split the examples come from
    seed: int = 42

    def check(self) -> None:
        if self.instructions not in INSTRUCTIONS:
            raise UserError(f"--instructions {self.instructions!r}: choose none, short or long")
        if self.instructions == "long" and (self.instructions_file is None or not self.instructions_file.is_file()):
            raise UserError("--instructions long: give the long instructions' text file with --instructions-file")
        if self.shots not in SHOTS:
            raise UserError(f"--shots {self.shots}: choose 0, 2 or 4 (examples come in pairs of conditions)")
        if self.shots and self.examples is None:
            raise UserError(f"--shots {self.shots}: give the training file the examples come from (--examples)")


def parse_answer(text: str) -> float | None:
    """The paper's rule: strip non-numeric characters and stray dots, cast to float; None when that fails."""
    digits = re.sub(r"[^0-9.]", "", text).strip(".")
    try:
        return float(digits)
    except ValueError:
        return None


def _block(s1: str, s2: str, condition: str, label: str) -> str:
    return f"Input: Sentence 1: {s1} Sentence 2: {s2} Condition: {condition}\nOutput:{label}"


def instructions_text(options: PromptOptions) -> str:
    if options.instructions == "none":
        return ""
    if options.instructions == "short":
        return SHORT_INSTRUCTIONS
    return options.instructions_file.read_text(encoding="utf-8").strip()


def build_prompts(data: PairData, options: PromptOptions) -> list[str]:
    """One prompt per row of `data`; the examples (shots/2 sentence pairs, both conditions each) drawn per row
    from `options.examples` with a seeded generator, skipping the row's own sentence pair."""
    rng = np.random.default_rng(options.seed)
    head = instructions_text(options)
    pairs = quad_pairs(options.examples).pairs if options.shots else np.zeros((0, 2), np.int64)
    if options.shots and len(pairs) < options.shots // 2 + 1:
        raise UserError(f"{options.examples.source}: too few complete sentence pairs for --shots {options.shots}")
    ex = options.examples.table.to_pydict() if options.shots else {}
    rows = data.table.select(["sentence1", "sentence2", "condition"]).to_pylist()
    prompts = []
    for row in rows:
        parts = [head] if head else []
        chosen: list[int] = []
        for index in rng.permutation(len(pairs)):
            high = int(pairs[index, 0])
            if (ex["sentence1"][high], ex["sentence2"][high]) == (row["sentence1"], row["sentence2"]):
                continue  # never the query's own pair
            chosen.append(int(index))
            if len(chosen) == options.shots // 2:
                break
        for index in chosen:
            for r in rng.permutation(pairs[index]):
                label = f" {float(ex['label'][r]):.1f}"
                parts.append(_block(ex["sentence1"][r], ex["sentence2"][r], ex["condition"][r], label))
        parts.append(_block(row["sentence1"], row["sentence2"], row["condition"], ""))
        prompts.append("\n\n".join(parts))
    return prompts


def open_generator(
    name: str,
    device: str,
    *,
    batch_size: int,
    endpoint: str | None = None,
    api_key_env: str = ModelSpec.api_key_env,
    timeout: float = ModelSpec.timeout,
) -> LanguageModel:
    """The model through pipeline.language_model: a local causal or sequence-to-sequence model (hub name, folder or
    .gguf file), or with `endpoint` an OpenAI-compatible server serving `name` (its /v1/completions)."""
    spec = ModelSpec(
        model=name, endpoint=endpoint, api_key_env=api_key_env, batch_size=batch_size, device=device, timeout=timeout
    )
    return open_model(spec)


def generate(model: LanguageModel, prompts: list[str]) -> list[str]:
    """Greedy answers of at most 20 new tokens, each prompt continued as raw text (the paper's layout)."""
    return model.generate(prompts, MAX_NEW_TOKENS)


def scores_from_answers(answers: list[str], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The parsed scores, invalid answers replaced by U[1, 5] draws; and which answers were invalid."""
    parsed = [parse_answer(answer) for answer in answers]
    invalid = np.array([value is None for value in parsed], dtype=bool)
    draws = np.random.default_rng(seed).uniform(1.0, 5.0, size=len(parsed))
    scores = np.array([draws[i] if value is None else value for i, value in enumerate(parsed)], np.float64)
    return scores, invalid
