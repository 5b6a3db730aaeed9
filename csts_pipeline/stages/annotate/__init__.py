"""annotate: the round trip that turns filtered caption pairs into a C-STS dataset (paper Section 2.2.2), with
people and, where asked, a language model as one more worker.

By subject (docs/architecture.md):

- `steps/`: what the CLI runs: `conditions`, `ratings`, `csts_split`, `followup` (`export --more`), `bws`,
  `qualification`, `audit`, `publish`, the language-model steps `model_ratings` (`annotate rate`), `drafts`
  (`annotate draft`) and `condition_check` (`annotate check-conditions`), and `summary` (what a step printed);
- `crowd/`: the platforms: `tasks`, `pages` (templates/), `label_studio`, `results` (one row), `screening`
  (what comes back), `kept` (filter's pairs), `hidden_gold` and `controls`, `gold_set`, `worker_list`,
  `guide` (the guideline examples), `files`;
- `labels/`: statistics on arrays, no files: `agreement`, `aggregators` (Mean, Median, RoundedMedian,
  OrdinalModel), `ordinal`, `verdict`, `quality`, `bws_scores`, `audit_stats`, `sampling`, `splits`;
- `release/`: `card`, `soft_labels`, `licenses`;
- `layout`: folder and file names and ids (the tables' schemas: pipeline/schemas.py).

File formats and the answer fields a results file must carry: docs/annotate.md.
"""

from csts_pipeline.pipeline.schemas import CSTS_SCHEMA
from csts_pipeline.stages.annotate.crowd.kept import KeptSource, kept_source
from csts_pipeline.stages.annotate.crowd.label_studio import config_text as label_studio_config
from csts_pipeline.stages.annotate.crowd.label_studio import write_project as write_label_studio
from csts_pipeline.stages.annotate.labels.splits import parse_ratios
from csts_pipeline.stages.annotate.layout import SPLITS
from csts_pipeline.stages.annotate.steps.bws import export_bws, import_bws
from csts_pipeline.stages.annotate.steps.conditions import export_conditions, import_conditions
from csts_pipeline.stages.annotate.steps.csts_split import split
from csts_pipeline.stages.annotate.steps.qualification import export_qualification, import_qualification
from csts_pipeline.stages.annotate.steps.ratings import export_ratings, import_ratings
from csts_pipeline.stages.annotate.steps.summary import describe

__all__ = [
    "CSTS_SCHEMA",
    "SPLITS",
    "KeptSource",
    "describe",
    "export_bws",
    "export_conditions",
    "export_qualification",
    "export_ratings",
    "import_bws",
    "import_conditions",
    "import_qualification",
    "import_ratings",
    "kept_source",
    "label_studio_config",
    "parse_ratios",
    "split",
    "write_label_studio",
]
