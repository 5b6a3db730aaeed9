"""annotate: the human round trip that turns filtered caption pairs into a C-STS dataset (paper Section 2.2.2).

The package, by responsibility:

- `steps`: the five steps (export conditions, import conditions, export ratings, import ratings, split);
- `bws_steps`, `bws`: Best-Worst Scaling instead of ratings (4-tuple design, counting scores, split-half
  reliability);
- `qualification`: the qualification test (export from a gold file, scoring, the workers later imports keep);
- `pages`: the HIT pages (templates/), rendered into each task folder's template.html;
- `kept`: reading the filter's kept pairs; `sampling`: the stratified sample of them;
- `tasks`: the task files for the crowd; `crowd`: reading and screening what the crowd sends back (`results`:
  one results row and the problems that leave a row out);
  `label_studio`: the same tasks and results for a Label Studio server (configs in templates/label_studio/);
- `agreement`: labels from ratings, Fleiss' kappa, Krippendorff's alpha (the `krippendorff` package),
  per-worker agreement;
  `splits`: train/validation/test;
- label quality: `ordinal` (the ordinal rater model), `verdict` (crowd-kit's Dawid-Skene for the not-pertinent
  flags), `quality` (model labels, workers table, high-vs-low check), `followup` (`export --more`), `audit` and
  `audit_report` (`annotate audit`), `soft_labels` (published ratings and distributions), `simulate` (crowds);
- `summary`: what a step did, as the command line prints it;
- `layout`: folder and file names, ids and schemas; `files`: atomic writes.

File formats and the answer fields a results file must carry: docs/annotate.md.
"""

from csts_pipeline.frame.schemas import CSTS_SCHEMA
from csts_pipeline.stages.annotate.crowd.kept import KeptSource, kept_source
from csts_pipeline.stages.annotate.crowd.label_studio import config_text as label_studio_config
from csts_pipeline.stages.annotate.crowd.label_studio import write_project as write_label_studio
from csts_pipeline.stages.annotate.labels.splits import parse_ratios
from csts_pipeline.stages.annotate.layout import SPLITS
from csts_pipeline.stages.annotate.steps.bws import export_bws, import_bws
from csts_pipeline.stages.annotate.steps.qualification import export_qualification, import_qualification
from csts_pipeline.stages.annotate.steps.round_trip import (
    export_conditions,
    export_ratings,
    import_conditions,
    import_ratings,
    split,
)
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
