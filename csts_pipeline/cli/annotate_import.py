"""csts-pipeline annotate import|split|audit: crowd results in, the C-STS splits out, a re-annotation held against
them (stages/annotate/, docs/annotate.md). The commands join `annotate_app` when cli/__init__.py imports this module.

`annotate import --stage X` serves four stages, each with its own options (steps/options.py): an option of
another stage is refused in one line by the parameter-source rule (cli/options.refuse_options_of_others)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from csts_pipeline.cli.annotate import (
    AnnotateOutOpt,
    AnnotateStageOpt,
    SeedOpt,
    WorkersOpt,
    annotate_app,
    annotate_folder,
    option_names,
    say_step,
)
from csts_pipeline.cli.options import DatasetOpt, ForceOpt, ManifestOpt, refuse_options_of_others, user_errors
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.annotate.aggregation.aggregators import aggregator_help
from csts_pipeline.stages.annotate.steps.options import (
    BwsImportOptions,
    ConditionsImportOptions,
    QualificationImportOptions,
    RatingsImportOptions,
    SplitOptions,
)

ResultsOpt = Annotated[
    list[Path],
    typer.Option(
        "--results",
        help="Results file: MTurk batch results CSV, CSV/JSONL with plain field names, or a Label Studio JSON "
        "export (.json); repeat for several.",
    ),
]
AggregateOpt = Annotated[str, typer.Option("--aggregate", "--label-policy", help=aggregator_help())]
AgreementSampleOpt = Annotated[
    int | None,
    typer.Option(
        "--agreement-sample",
        help="ratings: also measure agreement on this many random items with three random ratings each "
        "(the paper: 100).",
    ),
]
ExpertOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--expert",
        help="ratings, with --aggregate model: careful labels for a sample of the items (CSV, JSON lines, a JSON "
        "array or Parquet: item_id and label, or sentence1, sentence2, condition and label), which measure every "
        "worker and keep the expert's label; repeat for several.",
    ),
]
AmbiguitySdOpt = Annotated[
    float | None,
    typer.Option(
        "--ambiguity-sd",
        help="ratings, with --aggregate model: the sd (in points) of the shared per-item shift every rater of an "
        "item feels, where you know your crowd's; default: chosen "
        "from the people's answers and a prior around 0.2.",
    ),
]
RepeatsOpt = Annotated[int, typer.Option("--repeats", help="bws: random split-halves averaged for the reliability.")]
ImportSeedOpt = Annotated[
    int, typer.Option("--seed", help="ratings: seed of the agreement sample; bws: seed of the random halves.")
]
NotPertinentOpt = Annotated[
    float,
    typer.Option(
        "--not-pertinent-share",
        help="ratings: drop an item when more than this share of its raters flag it not pertinent (with "
        "--aggregate model: when the Dawid-Skene P(not pertinent) is above it).",
    ),
]
MaxErrorOpt = Annotated[
    float,
    typer.Option(
        "--max-rating-error", help="qualification: the most mean absolute error against the gold ratings that passes."
    ),
]
QualNameOpt = Annotated[
    str,
    typer.Option(
        "--qualification-name",
        help="qualification: the MTurk qualification type's name, for the grant file's UPDATE- column.",
    ),
]
ModelsOpt = Annotated[
    str | None,
    typer.Option(
        "--models",
        help="ratings: weigh only these models' answers (`annotate rate`), comma-separated, as model:<name> or "
        "<name> (default: every model rated).",
    ),
]
MinRatingsOpt = Annotated[int, typer.Option("--min-ratings", help="ratings: drop items with fewer ratings.")]


# each stage of `annotate import` and its options, each declared once (steps/options.py)
IMPORT_OPTIONS: dict[str, type] = {
    "--stage qualification": QualificationImportOptions,
    "--stage conditions": ConditionsImportOptions,
    "--stage ratings": RatingsImportOptions,
    "--stage bws": BwsImportOptions,
}
IMPORT_TAKES = {mode: option_names(options) for mode, options in IMPORT_OPTIONS.items()}
IMPORT_COMMON = ("stage", "results", "dataset", "manifest", "out", "force")


@annotate_app.command("import")
@user_errors
def annotate_import(
    ctx: typer.Context,
    stage: AnnotateStageOpt,
    results: ResultsOpt,
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    aggregate: AggregateOpt = RatingsImportOptions.aggregate,
    agreement_sample: AgreementSampleOpt = RatingsImportOptions.agreement_sample,
    ambiguity_sd: AmbiguitySdOpt = RatingsImportOptions.ambiguity_sd,
    expert: ExpertOpt = None,
    repeats: RepeatsOpt = BwsImportOptions.repeats,
    seed: ImportSeedOpt = RatingsImportOptions.seed,
    not_pertinent_share: NotPertinentOpt = RatingsImportOptions.not_pertinent_share,
    min_ratings: MinRatingsOpt = RatingsImportOptions.min_ratings,
    models: ModelsOpt = None,
    workers: WorkersOpt = None,
    max_rating_error: MaxErrorOpt = QualificationImportOptions.max_rating_error,
    qualification_name: QualNameOpt = QualificationImportOptions.qualification_name,
    out: AnnotateOutOpt = None,
    force: ForceOpt = False,
) -> None:
    """Validate crowd results against the exported tasks; write the accepted answers and a per-row report."""
    mode = f"--stage {stage}"
    if mode not in IMPORT_OPTIONS:
        raise UserError(f"--stage {stage!r}: expected qualification, conditions, ratings or bws")
    refuse_options_of_others(ctx, mode, IMPORT_TAKES, IMPORT_COMMON)
    given = {name: ctx.params[name] for name in IMPORT_TAKES[mode]}
    if "models" in given:
        given["models"] = None if models is None else [name.strip() for name in models.split(",") if name.strip()]
    if "expert" in given:
        given["expert"] = list(expert or [])
    folder, _ = annotate_folder(dataset, manifest, out)
    say_step(_import(stage, folder, results, IMPORT_OPTIONS[mode](**given), force=force))


def _import(stage: str, folder: Path, results: list[Path], options: Any, *, force: bool) -> dict[str, Any]:
    """Run the import step of `stage` (imported here: the steps load the statistics)."""
    if stage == "qualification":
        from csts_pipeline.stages.annotate.steps.qualification import import_qualification

        return import_qualification(folder, results, options, force=force)
    if stage == "conditions":
        from csts_pipeline.stages.annotate.steps.conditions import import_conditions

        return import_conditions(folder, results, options, force=force)
    if stage == "ratings":
        from csts_pipeline.stages.annotate.steps.ratings import import_ratings

        return import_ratings(folder, results, options, force=force)
    from csts_pipeline.stages.annotate.steps.bws import import_bws

    return import_bws(folder, results, options, force=force)


@annotate_app.command("split")
@user_errors
def annotate_split(
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    ratios: Annotated[str, typer.Option("--ratios", help="train:validation:test proportions.")] = SplitOptions.ratios,
    labels: Annotated[
        str,
        typer.Option(
            "--labels", help="likert (the rating import's labels) or bws (best-worst scores mapped linearly to 1-5)."
        ),
    ] = SplitOptions.labels,
    label_spread: Annotated[
        str,
        typer.Option(
            "--label-spread",
            help="import (the likert labels as the ratings import wrote them) or answers (their order, given the "
            "values of the people's own 1-5 answers: a regression target as wide as theirs).",
        ),
    ] = SplitOptions.label_spread,
    seed: SeedOpt = SplitOptions.seed,
    out: AnnotateOutOpt = None,
    force: ForceOpt = False,
) -> None:
    """Train/validation/test C-STS files (Parquet and CSV) from the kept labelled items (<annotate>/csts/)."""
    from csts_pipeline.stages.annotate.steps.csts_split import split

    folder, _ = annotate_folder(dataset, manifest, out)
    options = SplitOptions(ratios=ratios, seed=seed, labels=labels, label_spread=label_spread)
    say_step(split(folder, options, force=force))


@annotate_app.command("audit")
@user_errors
def annotate_audit(
    labels: Annotated[Path, typer.Option("--labels", help="The dataset's C-STS file (CSV or Parquet).")],
    reference: Annotated[
        Path,
        typer.Option("--reference", help="A re-annotation of (part of) it, C-STS CSV or Parquet; label -1 = rejected."),
    ],
    out: Annotated[Path, typer.Option("--out", help="Folder for audit.json and audit.md.")] = Path("audit"),
    seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap intervals.")] = 0,
    force: ForceOpt = False,
) -> None:
    """Hold labels against a re-annotation: agreement, rejected conditions, the most disputed rows."""
    from csts_pipeline.stages.annotate.steps.audit import describe_audit, run_audit

    typer.echo(describe_audit(run_audit(labels, reference, out, seed=seed, force=force)))
