"""`annotate rate`: a language model rates every row that the ratings export sends to people, as one more worker
`model:<name>` (docs/annotate.md, "Models in the loop").

Two questions per item, each read as a distribution from next-token probabilities (pipeline.language_model):
does the condition apply to both sentences (P(not pertinent) = P("no")), and how similar are they under it
(P(1..5)). The items are the ratings export's rows, hidden controls included: the model sees the sentences and
the condition only, so, as a person, it cannot tell a control from a real item, and the hidden gold scores it.
Output: `<annotate>/model_ratings/ratings.parquet` (the ratings schema, with `distribution` and `p_not_pertinent`
filled) and the answer cache `answers.parquet`; the ratings import takes these rows as one more worker, each with
its distribution (model_answers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.language_model import (
    AnswerCache,
    Cost,
    LanguageModel,
    ModelSpec,
    Prompt,
    load_prompt,
    open_model,
)
from csts_pipeline.pipeline.records import read_record, require_current
from csts_pipeline.pipeline.schemas import RATING_SCHEMA
from csts_pipeline.pipeline.shards import read_table
from csts_pipeline.stages.annotate.crowd.files import read_jsonl, write_parquet
from csts_pipeline.stages.annotate.crowd.screening import Rating
from csts_pipeline.stages.annotate.layout import CONDITIONS, INDIVIDUAL_RATINGS, RATINGS_TASKS, TASKS

MODEL_RATINGS = "model_ratings"  # <annotate>/model_ratings/: what `annotate rate` wrote
UNIT_ITEMS = 8  # items per unit: the answers of a finished unit survive a killed run
DIGITS = ("1", "2", "3", "4", "5")
YES_NO = ("yes", "no")
QUESTIONS = {"pertinent": YES_NO, "rate": DIGITS}  # prompt name -> answer options
ITEM_FIELDS = ("sentence1", "sentence2", "condition")


def worker_id(model: LanguageModel) -> str:
    return f"model:{model.name}"


def rate(annotate_dir: Path, spec: ModelSpec | LanguageModel, force: bool = False) -> dict[str, Any]:
    """Rate every row of the ratings export with the model (`spec`, or a model already open); a no-op when
    model, prompts and items are unchanged, and answers already in the folder's cache are never asked again."""
    tasks_dir = annotate_dir / RATINGS_TASKS
    upstream = require_current(tasks_dir, "annotate export --stage ratings", {"conditions": annotate_dir / CONDITIONS})
    # a server is contacted here: an unreachable one fails before anything is written
    model = spec if isinstance(spec, LanguageModel) else open_model(spec)
    prompts = {name: load_prompt("csts_pipeline.stages.annotate", name) for name in QUESTIONS}
    params = {"model": model.identity, "prompts": {name: p.describe() for name, p in prompts.items()}}
    inputs = {"tasks": upstream["fingerprint"]}
    folder = annotate_dir / MODEL_RATINGS
    with OutputFolder("annotate-rate", folder, params, inputs, reads=(tasks_dir,)) as out:
        if out.up_to_date() and not force:
            return out.unchanged()
        items = [{"item_id": t["item_id"], **{f: t[f] for f in ITEM_FIELDS}} for t in read_jsonl(tasks_dir / TASKS)]
        if not items:
            raise UserError(f"{tasks_dir / TASKS}: no items to rate")
        out.begin(force)
        model.cost = Cost()  # this run's cost only (a model may be shared by several steps)
        cache = AnswerCache(out, model.identity)
        answers = ask(model, prompts, items, cache)
        cache.write()
        table = ratings_table(items, answers, worker_id(model))
        write_parquet(table, out.staging / INDIVIDUAL_RATINGS)
        flagged = int(np.sum(table.column("not_pertinent").to_numpy(zero_copy_only=False)))
        counts = {"items": len(items), "not_pertinent": flagged, **cache.counts()}
        return out.finish(
            counts,
            worker_id=worker_id(model),
            model=model.identity,
            prompts=params["prompts"],
            decoding=model.decoding() | {"options": {name: list(o) for name, o in QUESTIONS.items()}},
            cost=model.cost.record(),
            files={"ratings": str(out.folder / INDIVIDUAL_RATINGS), "answers": str(out.folder / "answers.parquet")},
        )


def describe_rate(record: dict[str, Any]) -> str:
    """What `annotate rate` did, as the command line prints it."""
    counts, cost = record["counts"], record["cost"]
    return (
        f"{counts['items']} items rated by {record['worker_id']} ({counts['not_pertinent']} not pertinent) -> "
        f"{record['files']['ratings']}\n  answers: {counts['answers_computed']} asked, {counts['answers_cached']} "
        f"from the cache; {cost['prompts']} prompts, {cost['prompt_tokens']} prompt tokens, {cost['seconds']:.1f} s"
    )


def ask(
    model: LanguageModel, prompts: dict[str, Prompt], items: list[dict[str, Any]], cache: AnswerCache
) -> list[dict[str, np.ndarray]]:
    """Per item, the distribution of each question; unit by unit, asking only what the cache lacks."""
    found: list[dict[str, np.ndarray]] = []
    for unit, start in enumerate(range(0, len(items), UNIT_ITEMS)):
        chunk = items[start : start + UNIT_ITEMS]
        keyed = {
            name: [cache.key(prompt, {f: item[f] for f in ITEM_FIELDS}) for item in chunk]
            for name, prompt in prompts.items()
        }
        known = {key: cache.get(key) for keys in keyed.values() for key in keys}
        new: dict[str, dict[str, Any]] = {}
        for name, prompt in prompts.items():
            wanted = [i for i, key in enumerate(keyed[name]) if known[key] is None and key not in new]
            chats = [prompt.chat(**{f: chunk[i][f] for f in ITEM_FIELDS}) for i in wanted]
            for i, probs in zip(wanted, model.option_probs(chats, QUESTIONS[name]) if chats else []):
                new[keyed[name][i]] = {"probs": [float(p) for p in probs]}
        if new:
            cache.save_unit(unit, new)
        for i in range(len(chunk)):
            found.append({name: np.asarray(cache.answers[keyed[name][i]]["probs"]) for name in prompts})
    return found


def ratings_table(items: list[dict[str, Any]], answers: list[dict[str, np.ndarray]], worker: str) -> pa.Table:
    """One row per item in the ratings schema: the most likely digit, flagged when P(not pertinent) > 0.5, and the
    whole distribution."""
    rows = []
    for item, answer in zip(items, answers):
        p_not = float(answer["pertinent"][1])
        rows.append(
            {
                "item_id": item["item_id"],
                "worker_id": worker,
                "assignment_id": None,
                "rating": int(np.argmax(answer["rate"])) + 1,
                "not_pertinent": p_not > 0.5,
                "distribution": [round(float(p), 9) for p in answer["rate"]],
                "p_not_pertinent": round(p_not, 9),
            }
        )
    return pa.Table.from_pylist(rows, schema=RATING_SCHEMA)


# ------------------------------------------------------------------------------------ into the ratings import


@dataclass
class ModelAnswers:
    """The model rows for the ratings import: as accepted answers with their distributions (indexed into the
    rating tasks), and the fingerprint that makes the import depend on them."""

    ratings: list[Rating] = field(default_factory=list)
    inputs: dict[str, str] = field(default_factory=dict)


def model_input(annotate_dir: Path) -> dict[str, str]:
    """The ratings import's input from `annotate rate` (none when it never ran; refused when it is stale)."""
    if read_record(annotate_dir / MODEL_RATINGS) is None:
        return {}
    record = require_current(annotate_dir / MODEL_RATINGS, "annotate rate", {"tasks": annotate_dir / RATINGS_TASKS})
    return {"model_ratings": record["fingerprint"]}


def model_answers(annotate_dir: Path, rating_tasks: list[dict[str, Any]]) -> ModelAnswers:
    """What `annotate rate` left, matched to the exported rating tasks (none when it never ran)."""
    inputs = model_input(annotate_dir)
    if not inputs:
        return ModelAnswers()
    return answers_of(read_table(annotate_dir / MODEL_RATINGS / INDIVIDUAL_RATINGS), rating_tasks, inputs)


def answers_of(table: pa.Table, rating_tasks: list[dict[str, Any]], inputs: dict[str, str]) -> ModelAnswers:
    """Model rows (the ratings schema, as `annotate rate` writes them) as accepted answers indexed into
    `rating_tasks` by item id, each with its distribution q and P(not pertinent): the rater model weighs the
    answer by q, and the verdict by P. A row without a distribution is no answer and is left out; `rating` is
    q's most likely digit (also when flagged, so the gold check can score it)."""
    at = {task["item_id"]: i for i, task in enumerate(rating_tasks)}
    found = ModelAnswers(inputs=inputs)
    for row in table.to_pylist():
        item, q, p_not = at.get(row["item_id"]), row.get("distribution"), row.get("p_not_pertinent")
        if item is None or q is None or p_not is None or len(q) != len(DIGITS):
            continue
        flagged = p_not > 0.5
        digit = None if flagged else int(np.argmax(q)) + 1
        found.ratings.append(Rating(item, row["worker_id"], "", digit, flagged, tuple(q), float(p_not)))
    return found
