"""Prompting baselines (the paper's Section 4.2, Tables 4 and 11): a local Hugging Face generative model, causal or
sequence-to-sequence, asked to rate each row 1-5.

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
import torch
from csts_pipeline.frame.errors import UserError
from csts_pipeline.frame.packaged_models import hub_source, load_failure, resolve_model_path
from csts_pipeline.stages.train.data import PairData, quad_pairs
from tqdm import tqdm

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


def load_generator(name: str):
    """A causal or sequence-to-sequence model and its tokenizer, by hub name or folder (no remote code)."""
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    path = resolve_model_path(name)
    source = hub_source(path, "model", "give that local folder as the model") if path == name else path
    try:
        config = AutoConfig.from_pretrained(source)
        kind = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = kind.from_pretrained(source)
    except (OSError, ValueError) as exc:
        raise load_failure("model", name, exc, "give a local folder") from None
    if not (config.is_encoder_decoder or model.can_generate()):
        raise UserError(f"{name}: not a generative model (causal or sequence-to-sequence)")
    transformers.logging.set_verbosity_error()
    return model, tokenizer


def generate(model, tokenizer, prompts: list[str], device: torch.device, batch_size: int) -> list[str]:
    """Greedy answers of at most 20 new tokens; causal models are left-padded and only new tokens decoded."""
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    pad = tokenizer.pad_token_id
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    answers = []
    model.to(device).eval()
    with torch.inference_mode():
        for start in tqdm(range(0, len(prompts), batch_size), desc="prompt", unit="batch", dynamic_ncols=True):
            batch = tokenizer(prompts[start : start + batch_size], return_tensors="pt", padding=True, truncation=True)
            batch = {k: v.to(device) for k, v in batch.items() if k in ("input_ids", "attention_mask")}
            out = model.generate(
                **batch, max_new_tokens=MAX_NEW_TOKENS, do_sample=False, pad_token_id=pad, eos_token_id=eos
            )
            if not model.config.is_encoder_decoder:
                out = out[:, batch["input_ids"].shape[1] :]
            answers.extend(tokenizer.batch_decode(out, skip_special_tokens=True))
    return answers


def scores_from_answers(answers: list[str], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The parsed scores, invalid answers replaced by U[1, 5] draws; and which answers were invalid."""
    parsed = [parse_answer(answer) for answer in answers]
    invalid = np.array([value is None for value in parsed], dtype=bool)
    draws = np.random.default_rng(seed).uniform(1.0, 5.0, size=len(parsed))
    scores = np.array([draws[i] if value is None else value for i, value in enumerate(parsed)], np.float64)
    return scores, invalid
