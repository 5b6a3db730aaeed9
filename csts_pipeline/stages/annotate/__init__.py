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
- `labels/`: statistics on arrays, no files: `agreement`, `verdict`, `bws_scores`, `audit_stats`, `expert`,
  `sampling`, `splits`;
- `aggregation/`: an item's label: `aggregators` (Mean, Median, RoundedMedian, OrdinalModel), the rater model's
  decision (`thresholds`, `trust`, `weighing`, `model_workers`, `quality`) and its EM (`em/`);
- `release/`: `card`, `soft_labels`, `licenses`;
- `layout`: folder and file names and ids (the tables' schemas: pipeline/schemas.py).

File formats and the answer fields a results file must carry: docs/annotate.md.

Each name is imported from the module that defines it (`from csts_pipeline.stages.annotate.steps.ratings import
import_ratings`), so that a reader and a type checker can follow every call; this file imports nothing, so that a
command importing one sub-module (the command line reads `aggregation.aggregators` for its help) loads only that one.
"""
