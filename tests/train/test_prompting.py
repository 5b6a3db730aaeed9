"""Prompting baselines (evaluate --encoding prompt): the paper's parse rule, the prompt layout and its contrasting
examples, and a run with tiny random causal and seq2seq models built here (tokenizer: the packaged MiniLM's)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from csts_pipeline.cli import app
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.packaged_models import resolve_model_path
from csts_pipeline.stages.train.data import read_csts
from csts_pipeline.stages.train.prompting import PromptOptions, build_prompts, parse_answer, scores_from_answers
from csts_pipeline.testing.train_sample import write_sample_splits


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_sample_splits(tmp_path_factory.mktemp("csts"), {"train": 6, "validation": 4})


@pytest.fixture(scope="module", params=["gpt2", "t5"])
def tiny_generator(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel, T5Config, T5ForConditionalGeneration

    folder = tmp_path_factory.mktemp(request.param)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("packaged:all-MiniLM-L6-v2"))
    torch.manual_seed(0)
    if request.param == "gpt2":
        config = GPT2Config(vocab_size=tokenizer.vocab_size, n_embd=32, n_layer=1, n_head=2, n_positions=1024)
        model = GPT2LMHeadModel(config)
    else:
        config = T5Config(vocab_size=tokenizer.vocab_size, d_model=32, d_ff=64, d_kv=16, num_layers=1, num_heads=2)
        config.decoder_start_token_id = config.pad_token_id = tokenizer.pad_token_id
        config.eos_token_id = tokenizer.sep_token_id
        model = T5ForConditionalGeneration(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_the_papers_parse_rule() -> None:
    assert parse_answer("The Answer is 2.0.") == 2.0
    assert parse_answer(" 4") == 4.0 and parse_answer("3.5 out of 5") == 3.55  # digits joined, as the rule does
    assert parse_answer("similar") is None and parse_answer("...") is None
    scores, invalid = scores_from_answers(["2", "no idea", "5.0"], seed=1)
    assert invalid.tolist() == [False, True, False] and scores[0] == 2.0 and 1.0 <= scores[1] <= 5.0


def test_prompts_show_both_conditions_of_other_pairs(files: dict[str, Path], tmp_path: Path) -> None:
    train, query = read_csts(files["train"]), read_csts(files["train"]).take(np.array([0]))
    prompts = build_prompts(query, PromptOptions("short", shots=4, examples=train, seed=3))
    text = prompts[0]
    assert text.startswith("On a scale between 1 and 5") and text.endswith("Output:")
    blocks = text.split("\n\n")[1:]
    assert len(blocks) == 5 and all(b.startswith("Input: Sentence 1: ") for b in blocks)
    shown = [b.split(" Condition: ")[0] for b in blocks[:4]]
    assert shown[0] == shown[1] and shown[2] == shown[3] and shown[0] != shown[2]  # contrasting twos
    assert blocks[4].split(" Condition: ")[0] not in shown  # never the query's own pair
    long = tmp_path / "long.txt"
    long.write_text("Long instructions.\n")
    assert build_prompts(query, PromptOptions("long", long))[0].startswith("Long instructions.\n\nInput:")
    assert build_prompts(query, PromptOptions("none"))[0].startswith("Input:")
    for bad in (PromptOptions("long"), PromptOptions(shots=3), PromptOptions(shots=2)):
        with pytest.raises(UserError):
            bad.check()


def test_evaluate_prompt_reports_invalid_share(
    tiny_generator: Path, files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The share reported is the share of the model's own answers that the paper's rule cannot parse, and the
    scores written are those answers (or the seeded draws): checked against the answers the model gave."""
    import csts_pipeline.stages.train.evaluate as evaluate

    given: list[str] = []

    def spy(*args, **kwargs):
        answers = generate(*args, **kwargs)
        given.extend(answers)
        return answers

    generate = evaluate.generate
    monkeypatch.setattr(evaluate, "generate", spy)
    out = tmp_path / "m.json"
    args = ["evaluate", "--encoding", "prompt", "--model", str(tiny_generator), "--data", str(files["validation"])]
    args += ["--shots", "2", "--examples", str(files["train"]), "--device", "cpu", "--metrics-out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    metrics = json.loads(out.read_text())
    share = sum(parse_answer(answer) is None for answer in given) / len(given)
    assert metrics["n"] == len(given) == 8 and metrics["invalid_share"] == round(share, 4)
    assert f"{100 * share:.1f}% invalid answers" in result.output
    written = next(out.parent.glob("predictions_*.parquet"))
    expected, _ = scores_from_answers(given, seed=42)
    np.testing.assert_allclose(pq.read_table(written)["score"].to_numpy(), expected)
