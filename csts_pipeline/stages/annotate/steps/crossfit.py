"""`annotate crossfit`: the batch's own labels teach a similarity model, and that model rates the batch as one
more worker `model:crossfit-<base>`, without ever rating an item it learnt (docs/annotate-models.md, "The batch's
own model, fitted out of fold").

A model trained on the batch's labels and rating the same items agrees with them by memory: weighed by the
ratings import it would only echo the people. Cross-fitting removes the echo: the rated items are cut into K folds
by group (a pair's two conditions, and every item with the same two sentences, share a fold:
steps/crossfit_folds.py), K models are trained with `train`'s own code on the last ratings import's labels of
the other folds, and each scores its own fold. The scores become answers as a similarity model's do (their bin
among the batch's quintiles, the whole score read by the rater model), after each fold's scores are made normal
scores of their ranks within the fold, so that K models of K scales read as one.

What it learnt from: the ratings import's labels, recorded as the import's fingerprint and the fingerprint of the
people's answers behind it (results, qualification, expert sample, the export). The folder is stale when those
answers change, and `annotate split` and `export` refuse until it reruns (require_learnt_current); it is not stale
when the import that weighs it reruns, or the loop could never close. A second round (the crossfit on labels that
already weighed it) is `--force`. A killed run resumes: each finished fold's answers stay in the staging folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import TrainConfig
from csts_pipeline.pipeline.records import fingerprint, require_current, require_record
from csts_pipeline.pipeline.shards import read_table
from csts_pipeline.stages.annotate.aggregation.em.score_density import normal_scores
from csts_pipeline.stages.annotate.crowd.files import read_jsonl, write_parquet
from csts_pipeline.stages.annotate.labels.splits import spread_as_answers
from csts_pipeline.stages.annotate.layout import (
    CONDITIONS,
    INDIVIDUAL_RATINGS,
    ITEMS,
    RATINGS,
    RATINGS_IMPORT,
    RATINGS_TASKS,
    TASKS,
    model_dir,
    move_older_layout,
    ratings_sources,
)
from csts_pipeline.stages.annotate.steps import crossfit_folds
from csts_pipeline.stages.annotate.steps.csts_split import people_answers
from csts_pipeline.stages.annotate.steps.model_folders import CROSSFIT, learnt_from
from csts_pipeline.stages.annotate.steps.model_ratings import SCORES
from csts_pipeline.stages.annotate.steps.options import CrossfitOptions
from csts_pipeline.stages.annotate.steps.similarity_rater import BINS, ordinal_bins, ratings_rows, short_name

STAGE = "annotate-crossfit"
SCORES_SCHEMA = pa.schema(
    [("item_id", pa.string()), ("score", pa.float64()), ("bin", pa.int8()), ("fold", pa.int16()),
     ("raw_score", pa.float64())]
)  # fmt: skip


def crossfit_worker(options: CrossfitOptions) -> str:
    """The worker name the crossfit's answers carry: model:crossfit-<base>."""
    return f"model:{CROSSFIT}-{short_name(options.model)}"


def crossfit(annotate_dir: Path, options: CrossfitOptions) -> dict[str, Any]:
    """Train the K fold models on the last ratings import's labels and write their out-of-fold answers as the
    model worker's folder; a no-op while the people's answers, the export and the settings are unchanged."""
    options.check()
    tasks_dir, ratings_dir = annotate_dir / RATINGS_TASKS, annotate_dir / RATINGS
    export = require_current(tasks_dir, "annotate export --stage ratings", {"conditions": annotate_dir / CONDITIONS})
    learnt = learnt_from(require_record(ratings_dir, RATINGS_IMPORT))
    config = options.train_config()
    identity = model_identity(options, config)
    params = {"model": identity, "bins": BINS, "answer": "quantile bins of out-of-fold scores, one-hot"}
    inputs = {"tasks": export["fingerprint"], "people": learnt["people"]}
    move_older_layout(annotate_dir)
    folder = model_dir(annotate_dir, crossfit_worker(options))
    with OutputFolder(STAGE, folder, params, inputs, reads=(tasks_dir, ratings_dir)) as out:
        if out.up_to_date() and not options.force:
            return out.unchanged()
        require_current(ratings_dir, RATINGS_IMPORT, ratings_sources(annotate_dir))
        items = read_jsonl(tasks_dir / TASKS)
        jobs = fold_jobs(items, labels_of(ratings_dir, options.label_spread), options, config, out.staging)
        out.begin(force=False)  # a killed run's finished folds stay and are not trained again
        folds = [crossfit_folds.run_fold(job) for job in jobs]
        return _write(
            out, items, jobs=jobs, folds=folds, identity=identity, learnt=learnt | {"labelled_items": labelled(jobs)}
        )


def model_identity(options: CrossfitOptions, config: TrainConfig) -> dict[str, Any]:
    """What the worker is: the base model (its files' fingerprint), the folds, the seed and train's settings."""
    from csts_pipeline.stages.train.train import NOT_FINGERPRINTED, _model_fingerprint

    looks_local = options.model.startswith(("/", ".", "~"))
    if looks_local and not Path(options.model).expanduser().exists():
        raise UserError(f"--model {options.model}: not found")
    try:
        base = _model_fingerprint(options.model)
    except (OSError, ValueError) as exc:
        raise UserError(f"--model {options.model}: {exc}") from None
    settings = config.model_dump(exclude={*NOT_FINGERPRINTED, "model"})
    return {"kind": CROSSFIT, "model": options.model, "model_files": base, "folds": options.folds,
            "seed": options.seed, "epochs": options.epochs, "label_spread": options.label_spread,
            "train": settings}  # fmt: skip


def labels_of(ratings_dir: Path, spread: str = "import") -> dict[str, float]:
    """The import's label of every kept item (its posterior mean with `--aggregate model`), or with `spread`
    "answers" those labels' order given the spread of the people's own answers (as `annotate split
    --label-spread answers`): posterior means sit near the middle of the scale, and fold models trained on them
    scored worse than their base (docs/annotate-models.md)."""
    table = read_table(ratings_dir / ITEMS, ["item_id", "label", "status"]).to_pylist()
    kept = {r["item_id"]: float(r["label"]) for r in table if r["status"] == "kept" and r["label"] is not None}
    if spread != "answers" or not kept:
        return kept
    values = spread_as_answers(np.array(list(kept.values())), people_answers(ratings_dir / INDIVIDUAL_RATINGS))
    return dict(zip(kept, values.tolist()))


def fold_jobs(
    items: list[dict[str, Any]], labels: dict[str, float], options: CrossfitOptions, config: TrainConfig, staging: Path
) -> list[crossfit_folds.FoldJob]:
    """One job per fold; refused in one line when the folds cannot all train and rate."""
    if not labels:
        raise UserError(f"{RATINGS}/{ITEMS}: no kept item has a label to learn from; import ratings first")
    groups = int(crossfit_folds.groups_of(items).max()) + 1 if items else 0
    if groups < options.folds:
        raise UserError(
            f"--folds {options.folds}: the export has only {groups} groups of items that share a fold "
            "(pairs, with their sentence pairs); use fewer"
        )
    fold = crossfit_folds.assign_folds(items, options.folds, options.seed)
    jobs = []
    for k in range(options.folds):
        learn = [i for i, item in enumerate(items) if fold[i] != k and item["item_id"] in labels]
        if len(learn) < 2:
            raise UserError(f"--folds {options.folds}: fold {k + 1} would learn from {len(learn)} labelled items")
        columns = {name: [items[i][name] for i in learn] for name in ("item_id", *crossfit_folds.TEXT)}
        columns["pair_id"] = pa.array([items[i].get("pair_id") for i in learn], pa.int64())  # what it saw, kept
        rows = pa.table({**columns, "label": pa.array([labels[items[i]["item_id"]] for i in learn], pa.float64())})
        held = [items[i] for i in np.flatnonzero(fold == k)]
        where = staging / crossfit_folds.FOLDS / f"fold-{k + 1}"
        job = crossfit_folds.FoldJob(index=k, folder=where, train_rows=rows, held_out=held, config=config,
                                     device=options.device)  # fmt: skip
        jobs.append(job)
    return jobs


def labelled(jobs: list[crossfit_folds.FoldJob]) -> int:
    """Labelled items learnt from: each is in the training rows of every fold but its own."""
    return sum(job.train_rows.num_rows for job in jobs) // max(len(jobs) - 1, 1)


def _write(
    out: OutputFolder,
    items: list[dict[str, Any]],
    *,
    jobs: list[crossfit_folds.FoldJob],
    folds: list[dict[str, Any]],
    identity: dict[str, Any],
    learnt: dict[str, Any],
) -> dict[str, Any]:
    """The worker's answers in task order, their scores, and the record of what each fold learnt and cost."""
    raw = {}
    fold_of = {}
    for job in jobs:
        table = crossfit_folds.fold_scores(job.folder).to_pylist()
        raw |= {r["item_id"]: r["score"] for r in table}
        fold_of |= {r["item_id"]: job.index for r in table}
    ids = [item["item_id"] for item in items]
    score = np.array([raw[i] for i in ids], np.float64)
    if not np.isfinite(score).all():
        raise UserError(f"{identity['model']}: a fold model gave a score that is not a number")
    fold = np.array([fold_of[i] for i in ids])
    z = normal_scores(score, fold)  # each fold's scores by rank: K models' scales read as one
    bins, edges = ordinal_bins(z)
    worker = f"model:{CROSSFIT}-{short_name(identity['model'])}"
    write_parquet(ratings_rows(items, bins, worker), out.staging / INDIVIDUAL_RATINGS)
    columns = {"item_id": ids, "score": z, "bin": pa.array(bins, pa.int8()), "fold": pa.array(fold, pa.int16())}
    write_parquet(pa.table(columns | {"raw_score": score}, schema=SCORES_SCHEMA), out.staging / SCORES)
    per_bin = np.bincount(bins, minlength=BINS + 1)[1:].tolist()
    seconds = [f["seconds"] for f in folds]
    counts = {"items": len(items), "not_pertinent": 0, "per_bin": per_bin, "labelled_items": learnt["labelled_items"],
              "folds_resumed": sum(bool(f["resumed"]) for f in folds)}  # fmt: skip
    return out.finish(
        counts,
        worker_id=worker,
        model=identity,
        model_fingerprint=fingerprint(identity),
        learnt_from={k: v for k, v in learnt.items() if k != "labelled_items"},
        bin_edges=[round(float(e), 6) for e in edges],
        score_range=[round(float(z.min()), 6), round(float(z.max()), 6)],
        folds=[{k: v for k, v in f.items() if k != "fingerprint"} for f in folds],
        seconds_per_fold=round(float(np.mean(seconds)), 3),
        files={"ratings": str(out.folder / INDIVIDUAL_RATINGS), "scores": str(out.folder / SCORES)},
    )


def describe_crossfit(record: dict[str, Any]) -> str:
    """What `annotate crossfit` did, as the command line prints it."""
    counts, learnt = record["counts"], record["learnt_from"]
    resumed = f", {counts['folds_resumed']} resumed" if counts["folds_resumed"] else ""
    return (
        f"{counts['items']} items rated out of fold by {record['worker_id']} ({len(record['folds'])} folds{resumed}, "
        f"{record['seconds_per_fold']:.1f} s a fold) -> {record['files']['ratings']}\n"
        f"  learnt from: {counts['labelled_items']} labels of ratings import {learnt['import']} (people's answers "
        f"{learnt['people']}); items per bin {counts['per_bin']}; the ratings import weighs it as a similarity model"
    )
