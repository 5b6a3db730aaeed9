"""The paper's training presets: `--preset paper` (the authors' released script) and `--preset
paper:MODEL:ENCODING` (their Table 8), and `train_config`, which layers defaults, a preset, a manifest's `train:`
section and command-line options into one pipeline.manifest.TrainConfig. Sources per value in docs/train.md."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import TrainConfig

# `--preset paper`: the hyperparameters of the authors' released script (princeton-nlp/c-sts, run_sts.sh and
# run_sts.py defaults), the same for all three encodings there. Partial: other fields keep TrainConfig's defaults.
# Sources per value in docs/train.md.
_PAPER: dict[str, Any] = {
    "model": "princeton-nlp/sup-simcse-roberta-large",
    "pooler": "cls",  # their `cls` reads the [CLS] hidden state (the model is loaded without its pooler)
    "transform": False,
    "tri_head": "hadamard",
    "margin": 1.0,
    "learning_rate": 1e-5,
    "batch_size": 8,  # run_sts.sh today: 8 x 4 accumulation (an early commit had 4 x 8); 32 per step either way
    "grad_accum": 4,
    "epochs": 3,
    "weight_decay": 0.1,
    "warmup_ratio": 0.1,
    "max_grad_norm": 0.0,  # no clipping
    "max_length": 512,
    "seed": 42,
    "select": "last",  # the authors report the final epoch of the setting chosen on validation
}

# `--preset paper:<model>:<encoding>`: the paper's Table 8 (the setting selected on validation per model and
# encoding) on top of `paper`: learning rate, weight decay, transform, objective and, for tri, the head.
PAPER_MODELS = {
    "roberta-base": "roberta-base",
    "roberta-large": "roberta-large",
    "diffcse-base": "voidism/diffcse-roberta-base-sts",
    "simcse-base": "princeton-nlp/sup-simcse-roberta-base",
    "simcse-large": "princeton-nlp/sup-simcse-roberta-large",
}
PAPER_TABLE_8: dict[tuple[str, str], tuple[float, float, bool, str, str | None]] = {
    ("roberta-base", "cross"): (3e-5, 0.10, True, "mse", None),
    ("roberta-base", "bi"): (3e-5, 0.10, True, "mse", None),
    ("roberta-base", "tri"): (3e-5, 0.00, False, "quad+mse", "concat"),
    ("roberta-large", "cross"): (1e-5, 0.10, True, "mse", None),
    ("roberta-large", "bi"): (1e-5, 0.10, True, "quad+mse", None),
    ("roberta-large", "tri"): (1e-5, 0.00, True, "mse", "hadamard"),
    ("diffcse-base", "cross"): (3e-5, 0.10, False, "mse", None),
    ("diffcse-base", "bi"): (3e-5, 0.00, False, "mse", None),
    ("diffcse-base", "tri"): (3e-5, 0.10, False, "quad+mse", "hadamard"),
    ("simcse-base", "cross"): (3e-5, 0.10, True, "mse", None),
    ("simcse-base", "bi"): (3e-5, 0.10, False, "mse", None),
    ("simcse-base", "tri"): (3e-5, 0.10, False, "quad+mse", "hadamard"),
    ("simcse-large", "cross"): (1e-5, 0.10, True, "mse", None),
    ("simcse-large", "bi"): (1e-5, 0.10, False, "mse", None),
    ("simcse-large", "tri"): (1e-5, 0.00, True, "mse", "hadamard"),
}


def _table_8_preset(model: str, encoding: str) -> dict[str, Any]:
    lr, weight_decay, transform, objective, tri_head = PAPER_TABLE_8[(model, encoding)]
    row = {"model": PAPER_MODELS[model], "encoding": encoding, "learning_rate": lr, "weight_decay": weight_decay}
    row |= {"transform": transform, "objective": objective}
    return {**_PAPER, **row, **({"tri_head": tri_head} if tri_head else {})}


TRAIN_PRESETS: dict[str, dict[str, Any]] = {
    "paper": _PAPER,
    **{f"paper:{model}:{encoding}": _table_8_preset(model, encoding) for model, encoding in PAPER_TABLE_8},
}


def train_config(
    preset: str | None = None, overrides: dict[str, Any] | None = None, base: dict[str, Any] | None = None
) -> TrainConfig:
    """TrainConfig defaults <- the preset <- `base` (the keys a manifest's `train:` section sets) <- `overrides`
    (command-line options; None: not given). A bad value is a UserError naming the command-line option."""
    if preset is not None and preset not in TRAIN_PRESETS:
        raise UserError(
            f"--preset {preset!r}: known presets: paper, paper:MODEL:ENCODING with MODEL one of "
            f"{', '.join(PAPER_MODELS)} and ENCODING cross, bi or tri (the paper's Table 8)"
        )
    values = {**TRAIN_PRESETS.get(preset or "", {}), **(base or {})}
    values.update({key: value for key, value in (overrides or {}).items() if value is not None})
    try:
        return TrainConfig.model_validate(values)
    except ValidationError as exc:
        raise UserError("; ".join(_describe_option(error) for error in exc.errors())) from None


def _describe_option(error: dict[str, Any]) -> str:
    if not error["loc"]:  # a model validator's message, already in terms of options
        return error["msg"].removeprefix("Value error, ")
    name = str(error["loc"][0])
    if name not in TrainConfig.model_fields:
        return f"unknown train option {name!r}"
    return f"{TrainConfig.cli_flag(name)} {error.get('input')!r}: {error['msg'].lower()}"
