"""csts-pipeline annotate export: the crowd tasks of the human round trip around condition writing and rating
(stages/annotate/, docs/annotate.md), and what every annotate command shares (the folder, the stage option, how a
step's record is said). cli/__init__.py mounts `annotate_app` as the `annotate` sub-command."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

import typer

from csts_pipeline.cli.options import (
    DatasetOpt,
    ManifestOpt,
    refuse_options_of_others,
    say_up_to_date,
    user_errors,
)
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import open_manifest
from csts_pipeline.pipeline.storage import pull, remote_of
from csts_pipeline.stages.annotate.steps.options import (
    BwsExportOptions,
    ConditionsExportOptions,
    FollowupExportOptions,
    QualificationExportOptions,
    RatingsExportOptions,
)

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
WorkersOpt = Annotated[
    Path | None,
    typer.Option(
        "--workers",
        help="conditions, ratings, bws: keep only these qualified workers' rows (a workers.csv; default: "
        "<annotate>/qualification/workers.csv when it exists).",
    ),
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


def say_step(record: dict[str, Any]) -> None:
    """What a step did, or that it had nothing to do."""
    from csts_pipeline.stages.annotate.steps.summary import describe

    if not say_up_to_date(record):
        typer.echo(describe(record))


def option_names(options: type) -> set[str]:
    """The names of an options dataclass's fields: the command-line options that mode takes."""
    return {field.name for field in fields(options)}


# each mode of `annotate export` and its options, each declared once (steps/options.py); --input is read by two
EXPORT_OPTIONS: dict[str, type] = {
    "--stage qualification": QualificationExportOptions,
    "--stage conditions": ConditionsExportOptions,
    "--stage ratings": RatingsExportOptions,
    "--stage ratings --more": FollowupExportOptions,
    "--stage bws": BwsExportOptions,
}
EXPORT_TAKES = {mode: option_names(options) for mode, options in EXPORT_OPTIONS.items()}
EXPORT_TAKES["--stage conditions"] |= {"input_path"}
EXPORT_TAKES["--stage ratings"] |= {"input_path"}
EXPORT_TAKES["--stage ratings --more"] |= {"more"}
EXPORT_COMMON = ("stage", "dataset", "manifest", "out", "force", "platform_name", "task_format")

InputOpt = Annotated[
    Path | None,
    typer.Option(
        "--input",
        help="conditions: kept pairs to sample, a kept folder or a Parquet/CSV file with the filter's kept "
        "columns (default: <work_dir>/filter/kept/); ratings with --gold-share: the kept pairs the hidden "
        "controls are made from (those outside the batch).",
    ),
]
SampleOpt = Annotated[int, typer.Option("--n", help="conditions: pairs to sample.")]
AppearancesOpt = Annotated[
    int, typer.Option("--appearances", help="bws: 4-tuples each item appears in (N items: N x this / 4 tuples).")
]
BinsOpt = Annotated[int, typer.Option("--bins", help="conditions: quantile bins per axis of image cosine x iou.")]
GoldOpt = Annotated[
    Path | None,
    typer.Option(
        "--gold",
        help="qualification, ratings: the gold items (CSV; default: the package's own small set); ratings "
        "draws hidden controls from its rate items.",
    ),
]
GoldShareOpt = Annotated[
    float,
    typer.Option(
        "--gold-share",
        help="ratings: mix in hidden control pairs (made from kept pairs outside the batch, and --gold rate "
        "items not in the qualification test) as this share of the rows, e.g. 0.05; the import blocks workers "
        "who fail them (ratings/blocklist.csv); 0: none.",
    ),
]
MoreOpt = Annotated[
    bool,
    typer.Option(
        "--more",
        metavar="",
        help="ratings: a follow-up batch (<annotate>/ratings_more/) for the imported items whose label is "
        "still uncertain; import it with the first batch's results.",
    ),
]
BudgetOpt = Annotated[
    int | None,
    typer.Option(
        "--budget",
        help="ratings --more: at most this many human ratings in the batch (one an item), spent on the items "
        "whose posterior is widest.",
    ),
]
ExportForceOpt = Annotated[
    bool, typer.Option("--force", metavar="", help="Replace task files exported with other parameters.")
]
PlatformOpt = Annotated[
    str | None,
    typer.Option(
        "--platform",
        help="The crowd platform whose files to hand over, printed after the export: mturk (hits.csv and the "
        "HIT page template.html) or label-studio (label_studio/config.xml and tasks.json); every export writes "
        "both.",
    ),
]
FormatOpt = Annotated[str | None, typer.Option("--format", hidden=True, help="Refused: the platform is --platform.")]


@annotate_app.command("export")
@user_errors
def annotate_export(
    ctx: typer.Context,
    stage: AnnotateStageOpt,
    dataset: DatasetOpt = None,
    manifest: ManifestOpt = None,
    input_path: InputOpt = None,
    n: SampleOpt = ConditionsExportOptions.n,
    appearances: AppearancesOpt = BwsExportOptions.appearances,
    bins: BinsOpt = ConditionsExportOptions.bins,
    gold: GoldOpt = None,
    gold_share: GoldShareOpt = RatingsExportOptions.gold_share,
    seed: SeedOpt = ConditionsExportOptions.seed,
    out: AnnotateOutOpt = None,
    more: MoreOpt = False,
    budget: BudgetOpt = FollowupExportOptions.budget,
    force: ExportForceOpt = False,
    platform_name: PlatformOpt = None,
    task_format: FormatOpt = None,
) -> None:
    """Write crowd tasks (<annotate>/<stage>_tasks/): the batch input hits.csv (one task per row), a JSONL of ids
    and provenance, and each crowd platform's files (MTurk's HIT page, Label Studio's config and tasks)."""
    from csts_pipeline.stages.annotate.crowd.platform import DEFAULT, platform

    if task_format is not None:
        raise UserError(f"--format {task_format}: annotate export takes --platform {task_format}")
    mode = f"--stage {stage}" + (" --more" if more and stage == "ratings" else "")
    if f"--stage {stage}" not in EXPORT_OPTIONS:
        raise UserError(f"--stage {stage!r}: expected qualification, conditions, ratings or bws")
    refuse_options_of_others(ctx, mode, EXPORT_TAKES, EXPORT_COMMON)
    if mode == "--stage ratings":
        _check_controls(gold_share, gold, input_path)
    chosen = platform(platform_name or DEFAULT, stage)  # a stage it cannot show fails before anything is written
    options = EXPORT_OPTIONS[mode](**{name: ctx.params[name] for name in option_names(EXPORT_OPTIONS[mode])})
    folder, work_dir = annotate_folder(dataset, manifest, out)
    if mode == "--stage ratings --more":
        from csts_pipeline.stages.annotate.steps.followup import describe_more, export_more

        typer.echo(describe_more(export_more(folder, options, force=force)))
        return
    if stage == "conditions":
        _require_current_filter(dataset, manifest, input_path)
    say_step(_export(stage, folder, options, _kept(stage, work_dir, input_path, gold_share), force=force))
    if platform_name is not None:
        typer.echo(chosen.where(folder / f"{stage}_tasks", stage))


def _check_controls(gold_share: float, gold: Path | None, input_path: Path | None) -> None:
    """--gold and --input of a ratings export feed the hidden controls: without --gold-share they do nothing."""
    if input_path is not None and not gold_share:
        raise UserError("--input: only for --stage conditions, or ratings with --gold-share")
    if gold is not None and not gold_share:
        raise UserError("--gold: for --stage ratings only with --gold-share (the controls are drawn from it)")


def _kept(stage: str, work_dir: Path | None, input_path: Path | None, gold_share: float) -> Any:
    """The filter's kept pairs an export reads: the sample of conditions, the controls of ratings; else None."""
    from csts_pipeline.stages.annotate.crowd.kept import kept_source

    if stage == "conditions" or (stage == "ratings" and gold_share and (work_dir or input_path) is not None):
        return kept_source(work_dir, input_path)
    return None  # ratings without a source: export_ratings says what is missing


def _export(stage: str, folder: Path, options: Any, kept: Any, *, force: bool) -> dict[str, Any]:
    """Run the export step of `stage` (imported here: the steps load the statistics)."""
    if stage == "qualification":
        from csts_pipeline.stages.annotate.steps.qualification import export_qualification

        return export_qualification(folder, options, force=force)
    if stage == "conditions":
        from csts_pipeline.stages.annotate.steps.conditions import export_conditions

        return export_conditions(folder, kept, options, force=force)
    if stage == "ratings":
        from csts_pipeline.stages.annotate.steps.ratings import export_ratings

        return export_ratings(folder, options, source=kept, force=force)
    from csts_pipeline.stages.annotate.steps.bws import export_bws

    return export_bws(folder, options, force=force)
