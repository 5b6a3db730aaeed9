"""The ratings round: export every triplet (with hidden controls) as rating tasks, and import the ratings:
screened, merged with each model's ratings as one more worker (steps/model_folders.py), aggregated
(aggregation/aggregators.py), with agreement, the workers table and the high-against-low check. The previous output
stays until all of it is written."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.records import file_fingerprint, require_current
from csts_pipeline.pipeline.schemas import ITEM_SCHEMA, RATING_SCHEMA
from csts_pipeline.pipeline.shards import read_table
from csts_pipeline.stages.annotate.aggregation import model_workers, quality, thresholds, weighing
from csts_pipeline.stages.annotate.aggregation.aggregators import aggregator, aggregator_class
from csts_pipeline.stages.annotate.crowd import controls, gold_set, hidden_gold, platform, screening, tasks
from csts_pipeline.stages.annotate.crowd.files import read_jsonl, write_csv, write_json, write_parquet
from csts_pipeline.stages.annotate.crowd.kept import KeptSource
from csts_pipeline.stages.annotate.labels.agreement import ItemLabels, RatingArrays, agreement_summary
from csts_pipeline.stages.annotate.labels.expert import read_expert
from csts_pipeline.stages.annotate.labels.sampling import hash64
from csts_pipeline.stages.annotate.layout import (
    AGREEMENT,
    CONDITIONS,
    CONDITIONS_TASKS,
    INDIVIDUAL_RATINGS,
    INVERSIONS,
    ITEMS,
    PROVENANCE,
    RATINGS,
    RATINGS_TASKS,
    REPORT,
    TASKS,
    TRIPLETS,
    WORKERS,
)
from csts_pipeline.stages.annotate.steps import model_folders, qualification
from csts_pipeline.stages.annotate.steps.options import RatingsExportOptions, RatingsImportOptions

# -------------------------------------------------------------------------------------------------------------- export


def export_ratings(
    annotate_dir: Path,
    options: RatingsExportOptions = RatingsExportOptions(),
    *,
    source: KeptSource | None = None,
    force: bool = False,
) -> dict:
    """One rating task per (s1, s2, c), in a seeded order that separates a pair's two conditions; the HIT CSV
    hides which condition was meant to be high or low. With `gold_share`, hidden control pairs make up that
    share of the rows, made from the kept pairs of `source` outside the batch (stages/annotate/crowd/controls.py;
    `gold`: a gold file whose rate items not in the qualification test are controls too)."""
    seed, gold_share, gold = options.seed, options.gold_share, options.gold
    hidden_gold.check_share(gold_share)
    controls.require_source(source, gold_share)
    conditions_dir = annotate_dir / CONDITIONS
    upstream = require_current(
        conditions_dir, "annotate import --stage conditions", {"tasks": annotate_dir / CONDITIONS_TASKS}
    )
    params, inputs = {"seed": seed}, {"conditions": upstream["fingerprint"]}
    if gold_share > 0:
        if gold is not None and not gold.is_file():
            raise UserError(f"{gold}: gold file not found")
        params["gold_share"] = gold_share
        inputs["gold"] = file_fingerprint(gold or gold_set.default_gold())
        inputs["kept"] = source.fingerprint
        test = annotate_dir / qualification.QUALIFICATION_TASKS / TASKS
        inputs["qualification_test"] = file_fingerprint(test) if test.is_file() else None
    with OutputFolder(
        "annotate-export-ratings", annotate_dir / RATINGS_TASKS, params, inputs, reads=(conditions_dir,)
    ) as out:
        if out.up_to_date() and not force:
            return out.unchanged()
        tasks.guard_tasks(out, force)
        triplets = read_table(conditions_dir / TRIPLETS)
        is_low = triplets.column("condition_type").to_numpy(zero_copy_only=False) == "low"
        key = hash64(triplets.column("pair_id").to_numpy() * 2 + is_low, seed)
        triplets = triplets.take(pa.array(np.argsort(key, kind="stable")))
        real = tasks.rating_tasks(triplets)
        made = controls.make(
            source, annotate_dir, real, gold=gold, n=hidden_gold.gold_count(len(real), gold_share), seed=seed
        )
        records, n_gold = controls.mix(real, made, seed), len(made)

        out.begin(force=True)
        hits = tasks.hits_table(records, ("item_id", "sentence1", "sentence2", "condition"))
        files = {
            key: str(out.folder / name)
            for key, name in tasks.write_task_files(out.staging, hits, records, "ratings").items()
        }
        counts = {"items": len(real), "pairs": len({r["pair_id"] for r in real})}
        if n_gold:
            hidden_gold.write_gold_file(records, out.staging / hidden_gold.GOLD_FILE)
            files["gold"] = str(out.folder / hidden_gold.GOLD_FILE)
            counts |= {"gold_items": n_gold, "gold_share": round(n_gold / len(records), 4)}
        return out.finish(counts, files=files)


# -------------------------------------------------------------------------------------------------------------- import


def import_ratings(
    annotate_dir: Path,
    results: list[Path],
    options: RatingsImportOptions = RatingsImportOptions(),
    *,
    force: bool = False,
) -> dict:
    """Validate rating results; label each item by the aggregator `options.aggregate` names
    (aggregation/aggregators.py), drop the items too few rate or too many flag not pertinent, and report the
    agreement over the kept items: the options' meaning is in RatingsImportOptions (steps/options.py)."""
    how, not_pertinent_share, min_ratings = options.aggregate, options.not_pertinent_share, options.min_ratings
    agreement_sample, seed, workers = options.agreement_sample, options.seed, options.workers
    ambiguity_sd, expert = options.ambiguity_sd, expert_files(options.expert)
    models = None if options.models is None else list(options.models)
    _check_rating_options(how, not_pertinent_share, min_ratings, ambiguity_sd, expert)
    if agreement_sample is not None and agreement_sample < 1:
        raise UserError(f"--agreement-sample must be at least 1 (got {agreement_sample})")
    tasks_dir = annotate_dir / RATINGS_TASKS
    upstream = require_current(tasks_dir, "annotate export --stage ratings", {"conditions": annotate_dir / CONDITIONS})
    params = {"aggregate": how, "not_pertinent_share": not_pertinent_share, "min_ratings": min_ratings}
    params |= {"agreement_sample": agreement_sample, "seed": seed if agreement_sample is not None else None}
    params |= {"ambiguity_sd": ambiguity_sd} if ambiguity_sd is not None else {}
    qualified = qualification.qualified_workers(annotate_dir, workers)
    inputs = {"tasks": upstream["fingerprint"], "results": screening.results_fingerprint(results)}
    inputs |= qualification.workers_input(qualified)
    runs = model_folders.current_runs(annotate_dir, models)
    params |= {"models": [run.worker for run in runs]} if models is not None else {}
    inputs |= model_folders.model_input(runs)  # each model's own fingerprint: a rerun of one makes this stale
    inputs |= _expert_input(expert)
    test = qualification.answers_file(annotate_dir) if how == "model" else None
    inputs |= {"qualification_answers": file_fingerprint(test)} if test is not None else {}
    from_folder = test is not None or (qualified is not None and workers is None)
    inputs |= qualification.folder_input(annotate_dir, from_folder)
    with OutputFolder("annotate-import-ratings", annotate_dir / RATINGS, params, inputs, reads=(tasks_dir,)) as out:
        if out.up_to_date() and not force:
            return out.unchanged()
        tasks_all = read_jsonl(tasks_dir / TASKS)
        by_model = model_folders.model_answers(runs, tasks_all)
        screen, accepted = screening.screen_ratings(tasks_all, results, tasks_dir / TASKS, qualified)
        gold = hidden_gold.GoldCheck.of(tasks_all, accepted) if any(map(hidden_gold.is_gold, tasks_all)) else None
        if gold is not None and gold.blocked:
            screen, accepted = screening.screen_ratings(tasks_all, results, tasks_dir / TASKS, qualified, gold.blocked)
        if not any(not hidden_gold.is_control(tasks_all[a.item]) for a in accepted):
            raise screen.nothing_valid(results, "ratings")
        done = label_batch(
            tasks_all,
            accepted,
            by_model.ratings,
            how,
            not_pertinent_share=not_pertinent_share,
            min_ratings=min_ratings,
            gold=gold,
            agreement_sample=agreement_sample,
            seed=seed,
            ambiguity_sd=ambiguity_sd,
            described=by_model.described,
            expert=expert,
            test=test,
        )
        return _write_import(out, done, screen, gold, how)


def _write_import(
    out: OutputFolder, done: Labelled, screen: screening.Screen, gold: hidden_gold.GoldCheck | None, how: str
) -> dict:
    """The import's files, staged and committed whole, and its record's counts and figures."""
    out.begin(force=True)
    screen.write_report(out.staging / REPORT)
    write_parquet(done.item_table(), out.staging / ITEMS)
    write_parquet(done.rating_table(), out.staging / INDIVIDUAL_RATINGS)
    write_parquet(done.workers, out.staging / WORKERS)
    write_csv(done.checks.table, out.staging / INVERSIONS)
    write_json(out.staging / AGREEMENT, done.agreement)
    blocked = platform.block(out.staging, gold.blocklist()) if gold is not None else {}
    status = done.labels.status
    counts = {
        "items": len(done.items),
        "rows_read": screen.rows_read,
        "ratings_accepted": len(done.accepted),
        "excluded_rows": screen.excluded_rows(),
        **{f"items_{name}": int((status == name).sum()) for name in ("kept", "not_pertinent", "too_few_ratings")},
        "items_unanswered": int((status == "unanswered").sum()),
    }
    files = {name: str(out.folder / name) for name in (ITEMS, INDIVIDUAL_RATINGS, AGREEMENT, WORKERS, INVERSIONS)}
    files["report"] = str(out.folder / REPORT)
    if gold is not None:
        files |= {key: str(out.folder / value) for key, value in blocked.items()}
        counts |= {"gold_answers": done.agreement["gold"]["answers"], "workers_blocked": len(gold.blocked)}
    figures = {name: done.agreement[name] for name in ("fleiss_kappa", "alpha_ordinal", "alpha_interval")}
    return out.finish(counts, problems=screen.summary(), label_policy=how, **figures, files=files)


@dataclass(kw_only=True)
class Labelled:
    """What the ratings import computes from the tasks and the accepted answers, before anything is written."""

    items: list[dict]
    accepted: list[screening.Rating]
    labels: ItemLabels
    model: quality.ModelResult | None
    workers: pa.Table
    agreement: dict[str, Any]
    checks: quality.HighLow
    ratings: RatingArrays | None = None  # `accepted` as columns (RatingArrays.of), made once for the labels

    def item_table(self) -> pa.Table:
        """`items.parquet`."""
        return _item_table(self.items, self.labels, quality.item_columns(self.model, self.labels.ratings))

    def rating_table(self) -> pa.Table:
        """`ratings.parquet`."""
        return _individual_table(self.items, self.accepted, self.ratings)


def label_batch(
    tasks_all: list[dict],
    people: list[screening.Rating],
    models: list[screening.Rating],
    how: str,
    *,
    not_pertinent_share: float = RatingsImportOptions.not_pertinent_share,
    min_ratings: int = RatingsImportOptions.min_ratings,
    gold: hidden_gold.GoldCheck | None = None,
    agreement_sample: int | None = None,
    seed: int = RatingsImportOptions.seed,
    ambiguity_sd: float | None = None,
    described: dict[str, dict[str, str]] | None = None,
    expert: Path | list[Path] | None = None,
    test: Path | None = None,
) -> Labelled:
    """The import's labels from the rating tasks (hidden controls included, `gold` their check on people) and the
    accepted answers of people and of models (model_ratings.answers_of: each with its distribution): the label
    policy `how`, agreement, the workers table and the high-against-low check. `described`: what each model is
    and how its answers were read (model_folders.ModelRun.row), for the tables and summaries; `expert`: a file
    of careful labels for some items (labels/expert.py); `test`: the qualification import's answers.csv, whose
    rating items (their gold known) measure the people who took it (`--aggregate model` only). Everything the
    command computes goes through here; a bench or a simulation calls it with answers made in memory."""
    described = described or {}
    parts = hidden_gold.separate(tasks_all, people + models)
    items, accepted = parts.items, parts.accepted
    ratings = RatingArrays.of(accepted)
    anchor = (RatingArrays.of(parts.anchor), parts.anchor_truth) if parts.anchor else None
    conditions = [str(t.get("condition", "")) for t in items] + parts.anchor_conditions
    kinds = model_workers.condition_kinds(conditions) if models else None
    controls = (RatingArrays.of(parts.controls), parts.controls_flag) if parts.controls else None
    expert = expert_files(expert)
    careful = read_expert(expert, items) if expert else None
    known = None if careful is None else np.nan_to_num(careful.value)  # decimals kept: they set the scale's level
    tested = None
    if test is not None and how == "model":
        tested = qualification.test_answers(test, {r.worker for r in people})
    policy = aggregator(how, not_pertinent_share=not_pertinent_share, min_ratings=min_ratings, ambiguity=ambiguity_sd)
    evidence = weighing.Evidence(anchor=anchor, known=known, test=tested, kinds=kinds, controls=controls)
    labels = policy.fit_predict(ratings, len(items), evidence)
    labels = careful.publish(labels) if careful is not None else labels
    model = policy.result_
    agreement = {"label_policy": how, **agreement_summary(ratings, labels.status, agreement_sample, seed)}
    checks = quality.high_low(items, labels, model)
    scored = hidden_gold.GoldCheck.of(tasks_all, models).workers if gold is not None else {}
    workers = quality.workers_table(model, ratings, (gold.workers | scored) if gold else None, described)
    _describe_models(model, scored, described)
    agreement |= {
        "models": list(described.values()),
        "high_low": checks.summary,
        "model_workers": quality.workers_summary(model, workers, ambiguity_sd is not None) if model else None,
        "gold": gold.summary() if gold else None,
        "expert": None if careful is None else careful.summary(labels.answers),
        "qualification_test": None if tested is None else _test_summary(tested, test),
    }
    return Labelled(items=items, accepted=accepted, labels=labels, model=model, workers=workers,
                    agreement=agreement, checks=checks, ratings=ratings)  # fmt: skip


def _describe_models(
    model: quality.ModelResult | None, scored: dict[str, Any], described: dict[str, dict[str, str]]
) -> None:
    """Each model worker of the rater model's summary gets its gold answers and accuracy, as a person's, and what
    it is (`described`)."""
    for found in (model.models or {}).get("models", []) if model else []:
        found |= {"gold_answers": scored[found["worker_id"]].answers if found["worker_id"] in scored else 0}
        found["gold_accuracy"] = scored[found["worker_id"]].accuracy if found["gold_answers"] else None
        found |= described.get(found["worker_id"], {})


def _test_summary(tested: tuple[RatingArrays, np.ndarray], path: Path | None) -> dict[str, Any]:
    """agreement.json's record of the qualification answers the rater model measured the people on."""
    ratings = tested[0]
    return {"file": str(path), "ratings": len(ratings.item), "items": len(tested[1]),
            "workers": len(set(ratings.worker.tolist()))}  # fmt: skip


def expert_files(expert: Path | Sequence[Path] | None) -> list[Path]:
    """`--expert` as a list of files (it may be given once, several times, or not at all)."""
    return [] if expert is None else [expert] if isinstance(expert, Path) else list(expert)


def _expert_input(files: list[Path]) -> dict[str, Any]:
    """The import's input from the expert files: one file's fingerprint, or the list of several's."""
    if not files:
        return {}
    found = [file_fingerprint(path) for path in files]
    return {"expert": found[0] if len(found) == 1 else found}


def _check_rating_options(
    how: str,
    not_pertinent_share: float,
    min_ratings: int,
    ambiguity_sd: float | None = None,
    expert: list[Path] | None = None,
) -> None:
    aggregator_class(how)
    if expert and how != "model":
        raise UserError(f"--expert: only with --aggregate model (got --aggregate {how})")
    for path in expert or []:
        if not path.is_file():
            raise UserError(f"{path}: not found (--expert)")
    if ambiguity_sd is not None and how != "model":
        raise UserError(f"--ambiguity-sd: only with --aggregate model (got --aggregate {how})")
    if ambiguity_sd is not None and not 0 <= ambiguity_sd <= thresholds.MAX_AMBIGUITY_SD:
        raise UserError(f"--ambiguity-sd must be in [0, {thresholds.MAX_AMBIGUITY_SD}] points (got {ambiguity_sd})")
    if not 0 <= not_pertinent_share < 1:
        raise UserError(f"--not-pertinent-share must be in [0, 1) (got {not_pertinent_share})")
    if min_ratings < 1:
        raise UserError(f"--min-ratings must be at least 1 (got {min_ratings})")


def _item_table(items: list[dict], labels: ItemLabels, extra: dict[str, pa.Array]) -> pa.Table:
    """`items.parquet`: every rating item with its label, counts and status (and the model's `extra` columns),
    built a column at a time."""
    texts = ("item_id", *PROVENANCE, "sentence1", "sentence2", "condition", "condition_type")
    columns: dict[str, Any] = {name: [task[name] for task in items] for name in texts}
    columns |= {
        "label": pa.array(np.asarray(labels.label, np.float64), from_pandas=True),  # nan: null
        "ratings": labels.ratings,
        "not_pertinent": labels.flags,
        "answers": labels.answers,
        "status": labels.status,
        **extra,
    }
    return _table(columns, ITEM_SCHEMA)


def _individual_table(
    items: list[dict], accepted: list[screening.Rating], arrays: RatingArrays | None = None
) -> pa.Table:
    """`ratings.parquet`: every accepted answer, so labels and agreement can be recomputed; a model worker's rows
    also carry its distribution and P(not pertinent). Built a column at a time from the answers transposed, or,
    where no answer carries a distribution or a P(not pertinent) (people alone), from `arrays` (the answers as
    RatingArrays.of made them: a rating of 0 is one not given) with the assignment ids read off the answers."""
    if not accepted:
        return RATING_SCHEMA.empty_table()
    people = arrays is not None and arrays.distribution is None and len(arrays.item) == len(accepted)
    if people and not any(a.p_not_pertinent is not None for a in accepted):
        return _people_table(items, accepted, arrays)
    item, worker, assignment, rating, flag, distribution, p_flag = list(zip(*accepted))[:7]
    ids = np.array([task["item_id"] for task in items], object)[np.asarray(item, np.int64)]
    given = pa.array(assignment, pa.string())
    blank = pc.fill_null(pc.equal(given, ""), True).to_numpy(zero_copy_only=False)
    columns = {"item_id": ids, "worker_id": worker, "assignment_id": pa.array(assignment, pa.string(), mask=blank)}
    columns |= {"rating": rating, "not_pertinent": flag, "distribution": distribution, "p_not_pertinent": p_flag}
    return _table(columns, RATING_SCHEMA)


def _people_table(items: list[dict], accepted: list[screening.Rating], arrays: RatingArrays) -> pa.Table:
    """_individual_table's columns from the answers as arrays: no distribution, no P(not pertinent)."""
    n = len(accepted)
    ids = np.array([task["item_id"] for task in items], object)[arrays.item]
    assignment = [a.assignment for a in accepted]
    blank = pc.fill_null(pc.equal(pa.array(assignment, pa.string()), ""), True).to_numpy(zero_copy_only=False)
    rating = pa.array(arrays.rating.astype(np.int64), pa.int64(), mask=arrays.rating == 0)
    columns = {
        "item_id": ids,
        "worker_id": arrays.worker,
        "assignment_id": pa.array(assignment, pa.string(), mask=blank),
    }
    columns |= {"rating": rating, "not_pertinent": arrays.flagged}
    distribution = RATING_SCHEMA.field("distribution").type
    columns |= {"distribution": pa.nulls(n, distribution), "p_not_pertinent": pa.nulls(n, pa.float64())}
    return _table(columns, RATING_SCHEMA)


def _table(columns: dict[str, Any], schema: pa.Schema) -> pa.Table:
    """A table of `schema` from its columns (arrays, or sequences converted to the field's type)."""
    arrays = [pa.array(columns[f.name], f.type) if not isinstance(columns[f.name], pa.Array) else columns[f.name]
              for f in schema]  # fmt: skip
    return pa.Table.from_arrays([a.cast(f.type) for a, f in zip(arrays, schema)], schema=schema)
