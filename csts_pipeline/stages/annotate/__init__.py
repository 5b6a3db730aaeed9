"""annotate: the round trip that turns filtered caption pairs into a C-STS dataset (paper Section 2.2.2), with
people and, where asked, a language model as one more worker.

By subject (docs/architecture.md):

- `steps/`: what the CLI runs: `conditions`, `ratings`, `csts_split`, `followup` (`export --more`), `bws`,
  `qualification`, `audit`, `publish`, the language-model steps `model_ratings` (`annotate rate`), `drafts`
  (`annotate draft`), `condition_check` (`annotate check-conditions`) and `crossfit` with `crossfit_folds`
  (`annotate crossfit`: the batch's own model, out of fold), and `summary` (what a step printed);
- `crowd/`: the platforms: `tasks`, `pages` (templates/), `label_studio`, `results` (one row), `screening`
  (what comes back), `kept` (filter's pairs), `hidden_gold` and `controls`, `gold_set`, `worker_list`,
  `guide` (the guideline examples), `files`;
- `labels/`: statistics on arrays, no files: `agreement`, `aggregators` (Mean, Median, RoundedMedian,
  OrdinalModel), `ordinal`, `verdict`, `quality`, `bws_scores`, `audit_stats`, `sampling`, `splits`;
- `release/`: `card`, `soft_labels`, `licenses`;
- `layout`: folder and file names and ids (the tables' schemas: pipeline/schemas.py).

File formats and the answer fields a results file must carry: docs/annotate.md.

The names below are the steps the command line and the tests call, each imported from its module on first use:
importing a sub-package (the command line reads `labels.aggregators` for its help) runs this file, and loading every
step then would load the statistics for every command.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_FROM = {  # name -> "module:attribute"
    "CSTS_SCHEMA": "csts_pipeline.pipeline.schemas:CSTS_SCHEMA",
    "KeptSource": "csts_pipeline.stages.annotate.crowd.kept:KeptSource",
    "kept_source": "csts_pipeline.stages.annotate.crowd.kept:kept_source",
    "parse_ratios": "csts_pipeline.stages.annotate.labels.splits:parse_ratios",
    "SPLITS": "csts_pipeline.stages.annotate.layout:SPLITS",
    "export_bws": "csts_pipeline.stages.annotate.steps.bws:export_bws",
    "crossfit": "csts_pipeline.stages.annotate.steps.crossfit:crossfit",
    "CrossfitOptions": "csts_pipeline.stages.annotate.steps.crossfit:CrossfitOptions",
    "import_bws": "csts_pipeline.stages.annotate.steps.bws:import_bws",
    "export_conditions": "csts_pipeline.stages.annotate.steps.conditions:export_conditions",
    "import_conditions": "csts_pipeline.stages.annotate.steps.conditions:import_conditions",
    "split": "csts_pipeline.stages.annotate.steps.csts_split:split",
    "export_qualification": "csts_pipeline.stages.annotate.steps.qualification:export_qualification",
    "import_qualification": "csts_pipeline.stages.annotate.steps.qualification:import_qualification",
    "export_ratings": "csts_pipeline.stages.annotate.steps.ratings:export_ratings",
    "import_ratings": "csts_pipeline.stages.annotate.steps.ratings:import_ratings",
    "describe": "csts_pipeline.stages.annotate.steps.summary:describe",
}
__all__ = sorted(_FROM)


def __getattr__(name: str) -> Any:
    """A step's function (or a name the steps share), imported from its module the first time it is asked for."""
    if name not in _FROM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _FROM[name].split(":")
    value = getattr(import_module(module), attribute)
    globals()[name] = value
    return value
