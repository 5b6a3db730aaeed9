"""The annotate steps' options, each declared once with its default: the step uses the default it names here, and
the command line (cli/annotate*.py) shows it from here. This module imports nothing heavy, so the command line can
read it to build its help."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import TrainConfig
from csts_pipeline.stages.annotate.crowd.gold_set import MAX_RATING_ERROR
from csts_pipeline.stages.annotate.layout import LABEL_SPREADS

MINILM = "packaged:all-MiniLM-L6-v2"


@dataclass(frozen=True, kw_only=True)
class CrossfitOptions:
    """What `annotate crossfit` trains and how: the base model, the folds and `train`'s settings for each fold."""

    model: str = MINILM
    folds: int = 5
    epochs: int = 1
    seed: int = 0
    batch_size: int = 16
    learning_rate: float = 2e-5
    max_length: int = 128
    device: str = "auto"
    force: bool = False
    label_spread: str = "answers"

    def check(self) -> None:
        """Refuse a setting that cannot work, before anything is read or written."""
        if self.label_spread not in LABEL_SPREADS:
            raise UserError(f"--label-spread must be one of {', '.join(LABEL_SPREADS)} (got {self.label_spread!r})")
        limits = {"--folds": (self.folds, 2), "--epochs": (self.epochs, 1), "--batch-size": (self.batch_size, 1)}
        limits["--max-length"] = (self.max_length, 1)
        for flag, (value, least) in limits.items():
            if value < least:
                raise UserError(f"{flag} must be at least {least} (got {value})")
        if not self.learning_rate > 0:
            raise UserError(f"--lr must be above 0 (got {self.learning_rate})")

    def train_config(self) -> TrainConfig:
        """Each fold's `train` settings: the last epoch kept (no validation split to choose one by)."""
        return TrainConfig(
            model=self.model,
            epochs=self.epochs,
            seed=self.seed,
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            max_length=self.max_length,
            select="last",
        )


# ------------------------------------------------------------------------------------------------------------- export


@dataclass(frozen=True, kw_only=True)
class QualificationExportOptions:
    """`annotate export --stage qualification`: the gold items the test is made of (None: the package's own)."""

    gold: Path | None = None


@dataclass(frozen=True, kw_only=True)
class ConditionsExportOptions:
    """`annotate export --stage conditions`: how many kept pairs to sample, stratified over `bins` x `bins`
    quantile bins of image cosine and caption IoU."""

    n: int = 1000
    seed: int = 0
    bins: int = 4


@dataclass(frozen=True, kw_only=True)
class RatingsExportOptions:
    """`annotate export --stage ratings`: the task order's seed and the share of hidden control pairs (drawn from
    kept pairs outside the batch and the `gold` file's rate items)."""

    seed: int = 0
    gold_share: float = 0.0
    gold: Path | None = None


@dataclass(frozen=True, kw_only=True)
class FollowupExportOptions:
    """`annotate export --stage ratings --more`: at most `budget` human ratings (None: one per uncertain item)."""

    budget: int | None = None


@dataclass(frozen=True, kw_only=True)
class BwsExportOptions:
    """`annotate export --stage bws`: the 4-tuples' seed and how many tuples each item appears in."""

    seed: int = 0
    appearances: int = 8


# ------------------------------------------------------------------------------------------------------------- import


@dataclass(frozen=True, kw_only=True)
class QualificationImportOptions:
    """`annotate import --stage qualification`: the pass mark and the MTurk qualification type's name."""

    max_rating_error: float = MAX_RATING_ERROR
    qualification_name: str = "C-STS annotator"


@dataclass(frozen=True, kw_only=True)
class ConditionsImportOptions:
    """`annotate import --stage conditions`: the qualified workers' file (None: the qualification's, if any)."""

    workers: Path | None = None


@dataclass(frozen=True, kw_only=True)
class RatingsImportOptions:
    """`annotate import --stage ratings` (steps/ratings.py): the aggregator `aggregate` names labels each item
    (aggregation/aggregators.py); an item is dropped when more than `not_pertinent_share` of its raters flag it not
    pertinent, or it has fewer than `min_ratings` ratings. Agreement (Fleiss' kappa, Krippendorff's alpha,
    per worker) is over the kept items with two or more ratings, and with `agreement_sample` also on a sample
    (from `seed`) of that many items with three ratings each (the paper's protocol). `workers`: keep only
    these qualified workers' rows (None: the qualification's workers.csv, if any). `ambiguity_sd` (`--aggregate
    model` only): the sd of the shared per-item shift the rater model assumes (aggregation/em/shift.py); None: chosen
    from the people's answers and the prior. `models`: the model workers to weigh (`model:<name>` or `<name>`;
    None: every one `annotate rate` left). `expert` (`--aggregate model` only): careful labels for a sample of
    the items, one file or several (labels/expert.py)."""

    aggregate: str = "mean"
    not_pertinent_share: float = 0.5
    min_ratings: int = 1
    agreement_sample: int | None = None
    seed: int = 0
    workers: Path | None = None
    ambiguity_sd: float | None = None
    models: Sequence[str] | None = None
    expert: Path | Sequence[Path] | None = None


@dataclass(frozen=True, kw_only=True)
class BwsImportOptions:
    """`annotate import --stage bws`: the random split-halves of the reliability and their seed."""

    repeats: int = 1000
    seed: int = 0
    workers: Path | None = None


# ------------------------------------------------------------------------------------------------ language model


@dataclass(frozen=True, kw_only=True)
class DraftOptions:
    """`annotate draft`: a draft is kept when the model's P(it applies to both sentences) is at least
    `min_applies` (0: every draft that passes the page's checks; for a model whose yes/no is biased). The model
    itself is pipeline/model_spec.py's `ModelSpec`, like every command's that asks one."""

    min_applies: float = 0.5


@dataclass(frozen=True, kw_only=True)
class ConditionCheckOptions:
    """`annotate check-conditions`: a condition is doubtful when the model's P(yes) to either question is below
    `below`."""

    below: float = 0.5


@dataclass(frozen=True, kw_only=True)
class SplitOptions:
    """`annotate split`: the train:validation:test proportions, their seed, the labels split (likert or bws) and
    the values the likert labels are written with (as the import made them, or spread as the people's answers)."""

    ratios: str = "60:15:25"
    seed: int = 0
    labels: str = "likert"
    label_spread: str = "import"
