"""`csts-pipeline annotate export|import|split|audit`: the human round trip around condition writing and rating
(stages/annotate/, docs/annotate.md). cli/__init__.py mounts `annotate_app` as the `annotate` sub-command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from csts_pipeline.cli.options import DatasetOpt, ForceOpt, ManifestOpt, say_up_to_date, user_errors
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import open_manifest
from csts_pipeline.pipeline.storage import pull, remote_of
from csts_pipeline.stages.annotate.labels.aggregators import aggregator_help

annotate_app = typer.Typer(
    help="Human annotation round trip: export crowd tasks, import results, split into C-STS train/validation/test.",
    no_args_is_help=True,
)
AnnotateStageOpt = Annotated[
    str,
    typer.Option(
        "--stage",
        help="qualification (the test), conditions (writing a high and a low condition per pair), ratings (1-5) or "
        "bws (best-worst 4-tuples).",
    ),
]
AnnotateOutOpt = Annotated[
    Path | None, typer.Option("--out", help="Folder of the annotate files (default: <work_dir>/annotate/).")
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the sample, the task order, the 4-tuples or the split.")]

ResultsOpt = Annotated[
    list[Path],
    typer.Option(
        "--results",
        help="Results file: MTurk batch results CSV, CSV/JSONL with plain field names, or a Label Studio JSON "
        "export (.json); repeat for several.",
    ),
]
AggregateOpt = Annotated[str | None, typer.Option("--aggregate", "--label-policy", help=aggregator_help())]
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
RepeatsOpt = Annotated[
    int | None,
    typer.Option("--repeats", help="bws: random split-halves averaged for the reliability (default 1000)."),
]
ImportSeedOpt = Annotated[
    int, typer.Option("--seed", help="ratings: seed of the agreement sample; bws: seed of the random halves.")
]
NotPertinentOpt = Annotated[
    float | None,
    typer.Option(
        "--not-pertinent-share",
        help="ratings: drop an item when more than this share of its raters flag it not pertinent (with "
        "--aggregate model: when the Dawid-Skene P(not pertinent) is above it) (default 0.5).",
    ),
]
WorkersOpt = Annotated[
    Path | None,
    typer.Option(
        "--workers",
        help="conditions, ratings, bws: keep only these qualified workers' rows (a workers.csv; default: "
        "<annotate>/qualification/workers.csv when it exists).",
    ),
]
MaxErrorOpt = Annotated[
    float | None,
    typer.Option(
        "--max-rating-error",
        help="qualification: the most mean absolute error against the gold ratings that passes (default 1.0).",
    ),
]
QualNameOpt = Annotated[
    str | None,
    typer.Option(
        "--qualification-name",
        help="qualification: the MTurk qualification type's name, for the grant file's UPDATE- column "
        "(default 'C-STS annotator').",
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
MinRatingsOpt = Annotated[
    int | None, typer.Option("--min-ratings", help="ratings: drop items with fewer ratings (default 1).")
]


def annotate_folder(dataset: str | None, manifest: str | None, out: Path | None) -> tuple[Path, Path | None]:
    """The annotate folder and the manifest's work_dir (None when only --out is given). A URL work_dir is its
    local working cache, with the store's filter output pulled into it (docs/storage.md); annotate's own files
    stay in the cache."""
    if dataset is None and manifest is None:
        if out is None:
            raise UserError("give --dataset/--manifest (files under <work_dir>/annotate/) or --out DIR")
        return out, None
    work_dir = open_manifest(dataset, manifest).work_dir
    remote = remote_of(work_dir)
    if remote is not None:
        pull(remote, work_dir, "filter")
    return (out if out is not None else work_dir / "annotate"), work_dir


def _require_current_filter(dataset: str | None, manifest: str | None, input_path: Path | None) -> None:
    """The work_dir's filter output, when the export reads it, is what `status` calls done under this manifest
    (pipeline.executor.require_as_asked); on a URL work_dir, where the stages above it stay on the store, only its
    record is read (`status` checks them there)."""
    if input_path is not None or (dataset is None and manifest is None):
        return
    from csts_pipeline.pipeline.executor import require_as_asked
    from csts_pipeline.stages.annotate.crowd.kept import UPSTREAM

    loaded = open_manifest(dataset, manifest)
    if remote_of(loaded.work_dir) is None:
        require_as_asked(UPSTREAM.load()(loaded))


def _say(record: dict[str, Any]) -> None:
    """What a step did, or that it had nothing to do."""
    from csts_pipeline.stages.annotate.steps.summary import describe

    if not say_up_to_date(record):
        typer.echo(describe(record))


def _only_for(stage: str, wanted: str, **given: Any) -> None:
    used = [f"--{name.replace('_', '-')}" for name, value in given.items() if value is not None]
    if stage != wanted and used:
        raise UserError(f"{', '.join(used)}: only for --stage {wanted}")


@annotate_app.command("export")
@user_errors
def annotate_export(
    stage: AnnotateStageOpt,
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    input_path: Annotated[
        Path | None,
        typer.Option(
            "--input",
            help="conditions: kept pairs to sample, a kept folder or a Parquet/CSV file with the filter's kept "
            "columns (default: <work_dir>/filter/kept/); ratings with --gold-share: the kept pairs the hidden "
            "controls are made from (those outside the batch).",
        ),
    ] = None,
    n: Annotated[int | None, typer.Option("--n", help="conditions: pairs to sample (default 1000).")] = None,
    appearances: Annotated[
        int | None, typer.Option("--appearances", help="bws: 4-tuples each item appears in (default 8: 2N tuples).")
    ] = None,
    bins: Annotated[
        int | None, typer.Option("--bins", help="conditions: quantile bins per axis of image cosine x iou (default 4).")
    ] = None,
    gold: Annotated[
        Path | None,
        typer.Option(
            "--gold",
            help="qualification, ratings: the gold items (CSV; default: the package's own small set); ratings "
            "draws hidden controls from its rate items.",
        ),
    ] = None,
    gold_share: Annotated[
        float | None,
        typer.Option(
            "--gold-share",
            help="ratings: mix in hidden control pairs (made from kept pairs outside the batch, and --gold rate "
            "items not in the qualification test) as this share of the rows, e.g. 0.05; the import blocks workers "
            "who fail them (ratings/blocklist.csv). Default 0: none.",
        ),
    ] = None,
    seed: SeedOpt = 0,
    out: AnnotateOutOpt = None,
    more: Annotated[
        bool,
        typer.Option(
            "--more",
            metavar="",
            help="ratings: a follow-up batch (<annotate>/ratings_more/) for the imported items whose label is "
            "still uncertain; import it with the first batch's results.",
        ),
    ] = False,
    budget: Annotated[
        int | None,
        typer.Option(
            "--budget",
            help="ratings --more: at most this many human ratings in the batch (one an item), spent on the items "
            "whose posterior is widest.",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", metavar="", help="Replace task files exported with other parameters.")
    ] = False,
    platform_name: Annotated[
        str | None,
        typer.Option(
            "--platform",
            help="The crowd platform whose files to hand over, printed after the export: mturk (hits.csv and the "
            "HIT page template.html) or label-studio (label_studio/config.xml and tasks.json); every export writes "
            "both.",
        ),
    ] = None,
    task_format: Annotated[
        str | None, typer.Option("--format", hidden=True, help="Refused: the platform is --platform.")
    ] = None,
) -> None:
    """Write crowd tasks (<annotate>/<stage>_tasks/): the batch input hits.csv (one task per row), a JSONL of ids
    and provenance, and each crowd platform's files (MTurk's HIT page, Label Studio's config and tasks)."""
    from csts_pipeline.stages.annotate.crowd.kept import kept_source
    from csts_pipeline.stages.annotate.crowd.pages import STAGES
    from csts_pipeline.stages.annotate.crowd.platform import DEFAULT, platform
    from csts_pipeline.stages.annotate.steps.bws import export_bws
    from csts_pipeline.stages.annotate.steps.conditions import export_conditions
    from csts_pipeline.stages.annotate.steps.qualification import export_qualification
    from csts_pipeline.stages.annotate.steps.ratings import export_ratings

    _only_for(stage, "conditions", n=n, bins=bins)
    if input_path is not None and stage != "conditions" and not (stage == "ratings" and gold_share):
        raise UserError("--input: only for --stage conditions, or ratings with --gold-share")
    _only_for(stage, "bws", appearances=appearances)
    if stage not in ("qualification", "ratings") and gold is not None:
        raise UserError("--gold: only for --stage qualification or ratings")
    if stage == "ratings" and gold is not None and not gold_share:
        raise UserError("--gold: for --stage ratings only with --gold-share (the controls are drawn from it)")
    _only_for(stage, "ratings", more=more or None, gold_share=gold_share)
    if budget is not None and not more:
        raise UserError("--budget: only with --stage ratings --more")
    if more and (gold_share is not None or gold is not None):
        raise UserError("--gold-share, --gold: not with --more (a follow-up batch carries no controls)")
    if task_format is not None:
        raise UserError(f"--format {task_format}: annotate export takes --platform {task_format}")
    if stage not in STAGES:
        raise UserError(f"--stage {stage!r}: expected qualification, conditions, ratings or bws")
    chosen = platform(platform_name or DEFAULT, stage)  # a stage it cannot show fails before anything is written
    folder, work_dir = annotate_folder(dataset, manifest, out)
    if stage == "qualification":
        record = export_qualification(folder, gold, force)
    elif stage == "conditions":
        _require_current_filter(dataset, manifest, input_path)
        source = kept_source(work_dir, input_path)
        record = export_conditions(folder, source, 1000 if n is None else n, seed, 4 if bins is None else bins, force)
    elif stage == "ratings" and more:
        from csts_pipeline.stages.annotate.steps.followup import describe_more, export_more

        typer.echo(describe_more(export_more(folder, force, budget)))
        return
    elif stage == "ratings":
        given = gold_share and (work_dir is not None or input_path is not None)  # else export_ratings says why
        source = kept_source(work_dir, input_path) if given else None
        record = export_ratings(folder, seed, force, gold_share or 0.0, gold, source)
    else:
        record = export_bws(folder, seed, 8 if appearances is None else appearances, force)
    _say(record)
    if platform_name is not None:
        typer.echo(chosen.where(folder / f"{stage}_tasks", stage))


@annotate_app.command("import")
@user_errors
def annotate_import(
    stage: AnnotateStageOpt,
    results: ResultsOpt,
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    aggregate: AggregateOpt = None,
    agreement_sample: AgreementSampleOpt = None,
    ambiguity_sd: AmbiguitySdOpt = None,
    expert: ExpertOpt = None,
    repeats: RepeatsOpt = None,
    seed: ImportSeedOpt = 0,
    not_pertinent_share: NotPertinentOpt = None,
    min_ratings: MinRatingsOpt = None,
    models: ModelsOpt = None,
    workers: WorkersOpt = None,
    max_rating_error: MaxErrorOpt = None,
    qualification_name: QualNameOpt = None,
    out: AnnotateOutOpt = None,
    force: ForceOpt = False,
) -> None:
    """Validate crowd results against the exported tasks; write the accepted answers and a per-row report."""
    from csts_pipeline.stages.annotate.steps.bws import import_bws
    from csts_pipeline.stages.annotate.steps.conditions import import_conditions
    from csts_pipeline.stages.annotate.steps.qualification import import_qualification
    from csts_pipeline.stages.annotate.steps.ratings import import_ratings

    _only_for(
        stage,
        "ratings",
        aggregate=aggregate,
        not_pertinent_share=not_pertinent_share,
        min_ratings=min_ratings,
        agreement_sample=agreement_sample,
        ambiguity_sd=ambiguity_sd,
        expert=expert or None,
        models=models,
    )
    _only_for(stage, "bws", repeats=repeats)
    _only_for(stage, "qualification", max_rating_error=max_rating_error, qualification_name=qualification_name)
    if stage == "qualification" and workers is not None:
        raise UserError("--workers: not for --stage qualification (it writes the workers file)")
    folder, _ = annotate_folder(dataset, manifest, out)
    if stage == "qualification":
        error = 1.0 if max_rating_error is None else max_rating_error
        name = "C-STS annotator" if qualification_name is None else qualification_name
        record = import_qualification(folder, results, error, name, force)
    elif stage == "conditions":
        record = import_conditions(folder, results, force, workers)
    elif stage == "ratings":
        share = 0.5 if not_pertinent_share is None else not_pertinent_share
        how, least = aggregate or "mean", 1 if min_ratings is None else min_ratings
        chosen = None if models is None else [name.strip() for name in models.split(",") if name.strip()]
        given = list(expert or [])
        record = import_ratings(
            folder, results, how, share, least, force, agreement_sample, seed, workers, ambiguity_sd, chosen, given
        )
    elif stage == "bws":
        record = import_bws(folder, results, 1000 if repeats is None else repeats, seed, force, workers)
    else:
        raise UserError(f"--stage {stage!r}: expected qualification, conditions, ratings or bws")
    _say(record)


@annotate_app.command("split")
@user_errors
def annotate_split(
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    ratios: Annotated[str, typer.Option("--ratios", help="train:validation:test proportions.")] = "60:15:25",
    labels: Annotated[
        str,
        typer.Option(
            "--labels", help="likert (the rating import's labels) or bws (best-worst scores mapped linearly to 1-5)."
        ),
    ] = "likert",
    seed: SeedOpt = 0,
    out: AnnotateOutOpt = None,
    force: ForceOpt = False,
) -> None:
    """Train/validation/test C-STS files (Parquet and CSV) from the kept labelled items (<annotate>/csts/)."""
    from csts_pipeline.stages.annotate.labels.splits import parse_ratios
    from csts_pipeline.stages.annotate.steps.csts_split import split

    folder, _ = annotate_folder(dataset, manifest, out)
    _say(split(folder, seed, parse_ratios(ratios), force, labels))


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

    typer.echo(describe_audit(run_audit(labels, reference, out, seed, force)))
