"""Write a tiny random-init GPT-2 (causal LM) to a folder, for trying `evaluate --encoding prompt` offline.

    python bench/train/tiny_generator.py runs/tiny-gpt2
    python bench/train/tiny_generator.py runs/taught-gpt2 --width 128 --teach runs/csts-gen/csts_train.csv  # fitted
    csts-pipeline evaluate --encoding prompt --model runs/tiny-gpt2 --data runs/csts-gen/csts_validation.csv

No pretrained generative model can be fetched without the hub, so this one is built from a config, with the
packaged all-MiniLM-L6-v2 tokenizer (no download). Its weights are random: its answers are mostly not numbers
(invalid, replaced by U[1, 5] draws), so its correlations sit near chance. It shows the mechanics only. With
`--teach`, it is first fitted to answer a C-STS training file's 0-shot prompts with their labels.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from csts_pipeline.pipeline.packaged_models import resolve_model_path


def build(
    folder: Path, layers: int = 2, width: int = 64, seed: int = 0, teach: Path | None = None, epochs: int = 3
) -> Path:
    """Save the model and tokenizer to `folder` (loadable by AutoModelForCausalLM / AutoTokenizer); with `teach`,
    fitted first to answer that C-STS training file's prompts."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("packaged:all-MiniLM-L6-v2"))
    config = GPT2Config(
        vocab_size=tokenizer.vocab_size,
        n_embd=width,
        n_layer=layers,
        n_head=2,
        n_positions=1024,
        bos_token_id=tokenizer.cls_token_id,  # GPT-2's own ids lie outside this vocabulary
        eos_token_id=tokenizer.sep_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    if teach is not None:
        teach_answers(model, tokenizer, teach, epochs)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def teach_answers(model, tokenizer, train: Path, epochs: int, batch_size: int = 16) -> None:
    """Fit the model to answer each training row's 0-shot prompt (short instructions) with its label, loss on the
    answer tokens only: a model that has seen the answer format, trained offline in minutes on the CPU."""
    from csts_pipeline.stages.train.data import read_csts
    from csts_pipeline.stages.train.prompting import PromptOptions, build_prompts

    data = read_csts(train, "train")
    prompts = build_prompts(data, PromptOptions("short"))
    examples = []
    for prompt, label in zip(prompts, data.labels()):
        question = tokenizer(prompt, truncation=True)["input_ids"]  # as generate() tokenizes it: [CLS] ... [SEP]
        answer = tokenizer(f" {label:.1f}", add_special_tokens=False)["input_ids"] + [tokenizer.sep_token_id]
        examples.append((question + answer, len(question)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(0)
    model.train()
    for epoch in range(epochs):
        order = torch.randperm(len(examples), generator=generator).tolist()
        losses = []
        for start in range(0, len(order), batch_size):
            batch = [examples[i] for i in order[start : start + batch_size]]
            width = max(len(ids) for ids, _ in batch)
            ids = torch.full((len(batch), width), tokenizer.pad_token_id)
            labels = torch.full((len(batch), width), -100)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, (tokens, asked) in enumerate(batch):
                ids[row, : len(tokens)] = torch.tensor(tokens)
                labels[row, asked : len(tokens)] = torch.tensor(tokens[asked:])
                mask[row, : len(tokens)] = 1
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        print(f"teach epoch {epoch + 1}/{epochs}: answer loss {sum(losses) / len(losses):.3f}", flush=True)
    model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--teach", type=Path, help="C-STS training file: fit the model to answer its prompts")
    parser.add_argument("--teach-epochs", type=int, default=3)
    args = parser.parse_args()
    build(args.folder, args.layers, args.width, args.seed, args.teach, args.teach_epochs)
    kind = f"taught on {args.teach}" if args.teach else "random"
    print(f"tiny GPT-2 ({args.layers} layers, width {args.width}, seed {args.seed}, {kind}): {args.folder}")


if __name__ == "__main__":
    main()
