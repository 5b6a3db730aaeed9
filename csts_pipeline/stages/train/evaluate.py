"""evaluate: score a trained C-STS model, or a base encoder as a bi-encoder zero-shot (the paper's Table 2), on
C-STS-format data or STS Benchmark files.

Reader: stages.train.data. Model: stages.train.models (a `train` output's `best/` folder rebuilds its own
encoding and heads; any other model is a bi-encoder with its own pooling: the cosine of the two sentence
embeddings, each sentence encoded with the condition as a tokenizer pair when the data has conditions). Writer:
the metrics JSON and `predictions_<split>.parquet` next to it (docs/schemas.md). Evaluation is cheap and
deterministic, so a rerun simply recomputes and atomically replaces its outputs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from csts_pipeline.pipeline.device import resolve_device
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.model_spec import ModelSpec
from csts_pipeline.pipeline.packaged_models import resolve_model_path
from csts_pipeline.stages.train.data import PairData, read_pairs
from csts_pipeline.stages.train.models import EncoderSpec, is_trained_model, load_model, model_pooling
from csts_pipeline.stages.train.prompting import (
    PromptOptions,
    build_prompts,
    generate,
    open_generator,
    scores_from_answers,
)
from csts_pipeline.stages.train.scoring import correlations, half_precision, score_split, write_outputs

log = logging.getLogger(__name__)
TASKS = ("csts", "stsb")


@dataclass
class EvaluateOptions:
    model: str
    data: Path
    task: str = "csts"
    split: str | None = None
    encoding: str | None = None
    pooler: str | None = None
    max_length: int = 128
    batch_size: int = 64
    device: str = "auto"
    precision: str = "auto"
    metrics_out: Path = Path("runs/evaluate/metrics.json")
    prompt: PromptOptions | None = None  # --encoding prompt: the prompting baseline's settings
    endpoint: str | None = None  # --encoding prompt: an OpenAI-compatible server serving `model`
    api_key_env: str = ModelSpec.api_key_env  # the variable holding the endpoint's key
    timeout: float = ModelSpec.timeout  # --endpoint: seconds one request may take, all its tries together


def load_splits(options: EvaluateOptions) -> dict[str, PairData]:
    """One split, or each split of a C-STS source with a `split` column when no --split is given."""
    if options.task not in TASKS:
        raise UserError(f"--task {options.task!r}: choose one of {', '.join(TASKS)}")
    data = read_pairs(options.data, options.task, options.split)
    if options.split is None and "split" in data.table.column_names:
        names = sorted(set(data.column("split")))
        return {name: read_pairs(options.data, options.task, name) for name in names}
    return {data.name: data}


def model_for(options: EvaluateOptions):
    """A trained model as saved; a base model as a zero-shot bi-encoder."""
    if is_trained_model(options.model):
        model = load_model(options.model)
        if options.encoding is not None and options.encoding != model.spec.encoding:
            raise UserError(
                f"{options.model}: a trained {model.spec.encoding}-encoder, so --encoding {options.encoding} is wrong"
            )
        return model
    encoding = options.encoding or "bi"
    if encoding != "bi":
        raise UserError(
            f"--encoding {encoding}: a base model has no trained {encoding}-encoder head; zero-shot evaluation is for "
            "bi-encoders (train a model with `csts-pipeline train` first)"
        )
    pooler = options.pooler or model_pooling(resolve_model_path(options.model)) or "cls"
    spec = EncoderSpec(encoding="bi", pooler=pooler, max_length=options.max_length, base_model=options.model)
    return load_model(options.model, spec)


def run(options: EvaluateOptions) -> dict[str, dict]:
    """Score every split; returns {split: {spearman, pearson, n}} and writes the outputs."""
    if options.batch_size < 1:
        raise UserError("--batch-size must be at least 1")
    splits = load_splits(options)
    device = resolve_device(options.device)
    if options.encoding == "prompt":
        return run_prompting(options, splits)
    dtype = half_precision(device, options.precision)
    model = model_for(options).to(device)
    results = {}
    for name, data in splits.items():
        scores, metrics = score_split(model, data, device, options.batch_size, dtype)
        results[name] = (data, scores, metrics)
        log.info("evaluate: %s n=%d spearman %s", name, metrics["n"], metrics["spearman"])
    write_outputs(results, options.metrics_out)
    return {name: metrics for name, (_, _, metrics) in results.items()}


def run_prompting(options: EvaluateOptions, splits: dict[str, PairData]) -> dict[str, dict]:
    """The prompting baseline on every split: Spearman, Pearson and the share of invalid answers."""
    prompt = options.prompt or PromptOptions()
    prompt.check()
    if options.task != "csts":
        raise UserError("--encoding prompt rates C-STS rows (sentences and a condition); use --task csts")
    model = open_generator(
        options.model,
        options.device,
        batch_size=options.batch_size,
        endpoint=options.endpoint,
        api_key_env=options.api_key_env,
        timeout=options.timeout,
    )
    results = {}
    for name, data in splits.items():
        answers = generate(model, build_prompts(data, prompt))
        scores, invalid = scores_from_answers(answers, prompt.seed)
        metrics = {**correlations(scores, data.labels() if data.labelled else None)}
        metrics["invalid_share"] = round(float(invalid.mean()), 4)
        results[name] = (data, scores, metrics)
        log.info("evaluate: %s prompting, %.1f%% invalid answers", name, 100 * metrics["invalid_share"])
    write_outputs(results, options.metrics_out)
    return {name: metrics for name, (_, _, metrics) in results.items()}
