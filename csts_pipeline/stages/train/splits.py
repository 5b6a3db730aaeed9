"""The splits `train` reads (--train, --validation, --test, or one source's `split` column), what a task allows
and the label scale: C-STS 1-5 and STS-B 0-5, the task's range rather than the observed one."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import TrainConfig
from csts_pipeline.stages.train.data import LABEL_RANGES, LabelScale, PairData, label_scale, read_pairs


@dataclass
class Splits:
    train: PairData
    validation: PairData | None
    test: PairData | None
    sources: dict[str, Path] = field(default_factory=dict)


def read_splits(train_path: Path, validation: Path | None, test: Path | None, task: str) -> Splits:
    """--train, --validation and --test name one source each; a source with a `split` column gives its rows of
    that split, and the train source's `validation`/`test` rows stand in for a missing --validation/--test."""
    sources = {"train": train_path}
    train = read_pairs(train_path, task, "train")
    parts: dict[str, PairData | None] = {}
    for split, path in (("validation", validation), ("test", test)):
        if path is None and "split" in train.table.column_names:
            whole = read_pairs(train_path, task)
            if split in set(whole.column("split")):
                path = train_path
        if path is not None:
            sources[split] = path
        parts[split] = read_pairs(path, task, split) if path is not None else None
    return Splits(train, parts["validation"], parts["test"], sources)


def check_task(task: str, config: TrainConfig) -> None:
    """STS-B has no condition: nothing for a tri-encoder to condition on, and no condition pairs for Quad."""
    if task not in LABEL_RANGES:
        raise UserError(f"--task {task!r}: choose csts or stsb")
    if task == "stsb" and config.encoding == "tri":
        raise UserError("--task stsb: STS-B has no condition for a tri-encoder; use --encoding cross or bi")
    if task == "stsb" and config.objective != "mse":
        raise UserError(f"--task stsb: --objective {config.objective} pairs a sentence pair's two conditions; use mse")


def split_label_scale(splits: Splits, min_label: float | None, max_label: float | None, task: str) -> LabelScale:
    """C-STS labels are integers 1-5 (averages of raters stay inside), so the scale is 1-5 unless overridden,
    never the observed min and max: a split without 1s or 5s would otherwise be stretched. STS-B: 0-5."""
    if not splits.train.labelled:
        raise UserError(f"{splits.train.source}: the training split has no labels")
    labelled = [d for d in (splits.train, splits.validation) if d is not None]
    low, high = LABEL_RANGES[task]
    return label_scale(
        labelled,
        low if min_label is None else min_label,
        high if max_label is None else max_label,
    )
