"""`csts-pipeline annotate crossfit`: the batch's own labels train K similarity models, each rating only the fold
it never saw, as one more worker `model:crossfit-<base>` (steps/crossfit.py; docs/annotate-models.md, "The batch's
own model, fitted out of fold"). The command joins `annotate_app` when cli/__init__.py imports this module."""

from __future__ import annotations

from typing import Annotated

import typer

from csts_pipeline.cli.annotate import AnnotateOutOpt, annotate_app, annotate_folder
from csts_pipeline.cli.options import DatasetOpt, ForceOpt, ManifestOpt, ModelDeviceOpt, say_up_to_date, user_errors
from csts_pipeline.stages.annotate.steps.options import MINILM, CrossfitOptions

BaseModelOpt = Annotated[
    str,
    typer.Option(
        "--model",
        help="The base model each fold fine-tunes: a Hugging Face name or folder (packaged:all-MiniLM-L6-v2, the "
        "default, needs no download).",
    ),
]
FoldsOpt = Annotated[int, typer.Option("--folds", help="Folds: each item is rated by the one model not trained on it.")]
EpochsOpt = Annotated[int, typer.Option("--epochs", help="Training epochs of each fold's model.")]
CrossfitSeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the folds and of each fold's training.")]
TrainBatchOpt = Annotated[int, typer.Option("--batch-size", help="Rows per training batch.")]
LrOpt = Annotated[float, typer.Option("--lr", help="Peak learning rate (AdamW), as `train --lr`.")]
MaxLengthOpt = Annotated[int, typer.Option("--max-length", help="Tokens per encoded sequence, as `train`.")]
LabelSpreadOpt = Annotated[
    str,
    typer.Option(
        "--label-spread",
        help="answers (the import's labels in their order, given the spread of the people's own answers: fold models "
        "trained on posterior means scored worse than their base) or import (the labels as they are).",
    ),
]


@annotate_app.command("crossfit")
@user_errors
def annotate_crossfit(
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    model: BaseModelOpt = MINILM,
    folds: FoldsOpt = 5,
    epochs: EpochsOpt = 1,
    seed: CrossfitSeedOpt = 0,
    batch_size: TrainBatchOpt = 16,
    lr: LrOpt = 2e-5,
    max_length: MaxLengthOpt = 128,
    label_spread: LabelSpreadOpt = CrossfitOptions.label_spread,
    device: ModelDeviceOpt = "auto",
    out: AnnotateOutOpt = None,
    force: ForceOpt = False,
) -> None:
    """Train one model per fold on the last ratings import's labels of the other folds (a pair's conditions and
    a sentence pair's items share a fold) and let each rate its own fold, as worker model:crossfit-<base>; the
    ratings import weighs it like any similarity model. Stale when the people's answers change; --force trains
    again on the current import's labels (a second round)."""
    from csts_pipeline.stages.annotate.steps.crossfit import crossfit, describe_crossfit

    options = CrossfitOptions(model=model, folds=folds, epochs=epochs, seed=seed, batch_size=batch_size,
                              learning_rate=lr, max_length=max_length, label_spread=label_spread, device=device,
                              force=force)  # fmt: skip
    options.check()
    folder, _ = annotate_folder(dataset, manifest, out)
    record = crossfit(folder, options)
    if not say_up_to_date(record, "--force trains again on the current import's labels"):
        typer.echo(describe_crossfit(record))
