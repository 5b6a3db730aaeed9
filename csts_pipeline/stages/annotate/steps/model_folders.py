"""Several models at once: each model worker's answers in its own folder, `<annotate>/model_ratings/<name>-<hash>/`
(layout.model_dir), written by `annotate rate` (a language model, steps/model_ratings.py) or `annotate rate
--similarity-model` (steps/similarity_rater.py), so a rerun of one model leaves the others' answers in place.

The ratings import weighs every model there, or those `--models` names, each only while its answers were computed
from the current ratings export: its record's `inputs.tasks` is the export's fingerprint, and a model whose
record lacks it, or holds another, is refused in one line naming the `annotate rate` command that rebuilds it.
Each used model's own fingerprint enters the import's inputs (`model_ratings/<folder>`), so a rerun of one model
makes the import stale for every step that reads it (layout.ratings_sources).

A crossfit worker (`annotate crossfit`, steps/crossfit.py) is read as a similarity model, and its record also says
which labels it learnt from: the import's fingerprint and that of the people's answers behind it (people_inputs).
It is stale when those answers change, not when the import that weighs it reruns: require_learnt_current."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.records import RECORD, fingerprint, read_record, require_record
from csts_pipeline.pipeline.shards import read_table
from csts_pipeline.stages.annotate.layout import (
    INDIVIDUAL_RATINGS,
    MODEL_RATINGS,
    RATINGS_TASKS,
    model_input_key,
    move_older_layout,
)
from csts_pipeline.stages.annotate.steps.model_ratings import SCORES, ModelAnswers, answers_of

LANGUAGE_MODEL = "language model"
SIMILARITY_MODEL = "similarity model"
CROSSFIT = "crossfit"  # the model identity's kind (and the worker name's prefix) of `annotate crossfit`


@dataclass
class ModelRun:
    """One model worker's committed answers: its folder and record."""

    folder: Path
    record: dict[str, Any]

    @property
    def worker(self) -> str:
        return str(self.record["worker_id"])

    @property
    def kind(self) -> str:
        """A language model or a similarity model (the record's model identity says which)."""
        similar = self.record.get("model", {}).get("kind") in ("similarity", CROSSFIT)
        return SIMILARITY_MODEL if similar else LANGUAGE_MODEL

    @property
    def learnt(self) -> str | None:
        """A crossfit's labels, in words (None for any other model)."""
        learnt = self.record.get("learnt_from")
        if learnt is None:
            return None
        model = self.record["model"]
        return (
            f"{model['folds']} folds of {model['model']}, each trained on the other folds' labels of ratings import "
            f"{learnt['import']} (people's answers {learnt['people']})"
        )

    @property
    def reading(self) -> str:
        """How the ratings import reads its answers, in words: a similarity model's whole score through a density
        per true label (aggregation/em/score_density.py; its bins only for a folder of an older version, without
        scores.parquet), a language model's next-token distributions."""
        if self.kind == SIMILARITY_MODEL:
            edges = ", ".join(f"{e:.3f}" for e in self.record.get("bin_edges", []))
            scored = "out-of-fold score" if self.learnt else "similarity score"
            learnt = f"; learnt from {self.learnt}" if self.learnt else ""
            if (self.folder / SCORES).is_file():
                return (
                    f"its answers are its {scored}s, read as the normal score of their rank in the batch "
                    "through a normal density per true label that the import learns (its bins 1-5 among the "
                    f"batch's quantiles kept beside them, bin edges {edges}), not asked whether pertinent{learnt}"
                )
            return (
                f"its answers are bins 1-5 of its {scored} among the batch's quantiles (bin edges {edges}; "
                f"no scores.parquet in its folder), not asked whether pertinent{learnt}"
            )
        counts = self.record.get("counts", {})
        return (
            "its answers are P(1..5) and P(not pertinent) read from its next-token probabilities "
            f"({counts.get('read_logprobs', 0)} by logprobs, {counts.get('read_samples', 0)} by samples)"
        )

    def rerun(self) -> str:
        """The command that rates again with this model."""
        model = self.record.get("model", {})
        if model.get("kind") == CROSSFIT:
            return (
                f"csts-pipeline annotate crossfit --model {model.get('model')} --folds {model.get('folds')} "
                f"--epochs {model.get('epochs')} --seed {model.get('seed')}"
            )
        if self.kind == SIMILARITY_MODEL:
            return f"csts-pipeline annotate rate --similarity-model {model.get('model')}"
        if model.get("kind") == "endpoint":
            return f"csts-pipeline annotate rate --endpoint {model.get('endpoint')} --model {model.get('model')}"
        return f"csts-pipeline annotate rate --model {model.get('model')}"

    def row(self) -> dict[str, str]:
        """What the import's tables and summaries say of the model (workers.parquet, agreement.json)."""
        found = {"worker_id": self.worker, "model_kind": self.kind, "model_reading": self.reading}
        return found | ({"learnt_from": self.learnt} if self.learnt else {})


def model_runs(annotate_dir: Path) -> list[ModelRun]:
    """Every model folder with a whole committed output, by worker id; a folder holding files but no record (its
    answers without what made them) is refused in one line, not skipped: skipped, the import would weigh the
    other models only and say nothing."""
    top = annotate_dir / MODEL_RATINGS
    found = []
    for folder in sorted(top.iterdir()) if top.is_dir() else []:
        if not folder.is_dir() or folder.name[0] in "._":
            continue
        if read_record(folder) is None:
            _require_empty(folder)
            continue
        found.append(ModelRun(folder, require_record(folder, "annotate rate")))
    return sorted(found, key=lambda run: run.worker)


def _require_empty(folder: Path) -> None:
    """Refuse a model folder without its record that still holds files (an empty one is nothing to weigh)."""
    if any(path.is_file() and not path.name.startswith((".", "_")) for path in folder.iterdir()):
        raise UserError(
            f"{folder}: a model's answers without their record ({RECORD}): which model and which ratings export "
            "made them is unknown; rate again with that model (`csts-pipeline annotate rate`), or remove the folder"
        )


def chosen_runs(annotate_dir: Path, names: list[str] | None) -> list[ModelRun]:
    """The models the import weighs: every one there, or those `names` gives (`model:<name>` or `<name>`); an
    unknown name is refused, listing the ones there."""
    runs = model_runs(annotate_dir)
    if names is None:
        return runs
    by_worker = {run.worker: run for run in runs}
    chosen = []
    for name in names:
        worker = name if name.startswith("model:") else f"model:{name}"
        if worker not in by_worker:
            there = ", ".join(by_worker) or "none (run `csts-pipeline annotate rate` first)"
            where = annotate_dir / MODEL_RATINGS
            raise UserError(f"{where}: --models {name}: no such model; the models there: {there}")
        chosen.append(by_worker[worker])
    return sorted({run.worker: run for run in chosen}.values(), key=lambda run: run.worker)


def require_current_run(annotate_dir: Path, run: ModelRun) -> None:
    """Refuse a model's answers computed from another ratings export than the current one (or from an unknown
    one: a record without `inputs.tasks`)."""
    tasks = require_record(annotate_dir / RATINGS_TASKS, "annotate export --stage ratings")
    if run.record.get("inputs", {}).get("tasks") != tasks.get("fingerprint"):
        raise UserError(
            f"{run.folder}: stale: {run.worker}'s answers were not computed from the current ratings export; "
            f"rerun `{run.rerun()}` first"
        )


def current_runs(annotate_dir: Path, names: list[str] | None) -> list[ModelRun]:
    """The chosen models (chosen_runs), each current against the ratings export."""
    move_older_layout(annotate_dir)
    runs = chosen_runs(annotate_dir, names)
    for run in runs:
        require_current_run(annotate_dir, run)
    return runs


def model_input(runs: list[ModelRun]) -> dict[str, str]:
    """The ratings import's inputs from the models it weighs: each folder's fingerprint."""
    return {model_input_key(run.folder): str(run.record["fingerprint"]) for run in runs}


def model_answers(runs: list[ModelRun], rating_tasks: list[dict[str, Any]]) -> ModelAnswers:
    """The models' answers matched to the exported rating tasks, with what each model is (ModelRun.row)."""
    found = ModelAnswers(inputs=model_input(runs))
    for run in runs:
        scores = read_table(run.folder / SCORES) if (run.folder / SCORES).is_file() else None  # a similarity model
        found.ratings += answers_of(read_table(run.folder / INDIVIDUAL_RATINGS), rating_tasks, {}, scores).ratings
        found.described[run.worker] = run.row()
    return found


# ------------------------------------------------------------------------------------- what a crossfit learnt from


def people_inputs(ratings_record: dict[str, Any]) -> dict[str, str]:
    """The ratings import's inputs that are people's answers and what judges them (export, results,
    qualification, expert sample): all but the model folders it weighed."""
    return {k: v for k, v in ratings_record.get("inputs", {}).items() if not k.startswith(f"{MODEL_RATINGS}/")}


def learnt_from(ratings_record: dict[str, Any]) -> dict[str, Any]:
    """What a crossfit trained on the labels of this import learnt from: the import, the people's answers behind
    it, its label policy and the model folders it weighed."""
    weighed = [k.split("/", 1)[1] for k in ratings_record.get("inputs", {}) if k.startswith(f"{MODEL_RATINGS}/")]
    return {
        "import": str(ratings_record["fingerprint"]),
        "people": fingerprint(people_inputs(ratings_record)),
        "aggregate": ratings_record.get("params", {}).get("aggregate"),
        "models_weighed": sorted(weighed),
    }


def require_learnt_current(annotate_dir: Path, ratings_record: dict[str, Any]) -> None:
    """Refuse labels that weighed a crossfit trained on other people's answers than theirs (new results, a new
    expert sample or qualification since): its answers echo labels that are gone. The import itself may weigh it
    (its new labels are what the crossfit reruns on); what reads the labels (split, export) may not."""
    people = fingerprint(people_inputs(ratings_record))
    for key in ratings_record.get("inputs", {}):
        if not key.startswith(f"{MODEL_RATINGS}/"):
            continue
        record = read_record(annotate_dir / key)
        if record is None or record.get("model", {}).get("kind") != CROSSFIT:
            continue
        if record.get("learnt_from", {}).get("people") != people:
            run = ModelRun(annotate_dir / key, record)
            raise UserError(
                f"{run.folder}: stale: {run.worker} learnt from other people's answers than the ratings import's "
                f"(new results, expert sample or qualification); rerun `{run.rerun()}`, then the ratings import"
            )
