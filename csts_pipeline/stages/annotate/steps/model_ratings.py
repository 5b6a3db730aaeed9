"""`annotate rate`: a language model rates every row that the ratings export sends to people, as one more worker
`model:<name>` (models in the loop).

Two questions per item, each read as a distribution from next-token probabilities (pipeline.language_model):
does the condition apply to both sentences (P(not pertinent) = P("no")), and how similar are they under it
(P(1..5)). The items are the ratings export's rows, hidden controls included: the model sees the sentences and
the condition only, so, as a person, it cannot tell a control from a real item, and the hidden gold scores it.
Output: the model's own folder `<annotate>/model_ratings/<name>-<hash>/` (layout.model_dir; steps/model_folders.py:
several models at once), `ratings.parquet` (schemas.MODEL_RATING_SCHEMA: the ratings schema with
`distribution` and `p_not_pertinent` filled, and how each answer was read) and the answer cache `answers.parquet`;
the ratings import takes the answered rows as one more worker, each with its distribution (model_answers). An item
the model gave no answer for is counted and kept with nulls, never made a rating."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.language_model import (
    Answer,
    AnswerCache,
    Cost,
    LanguageModel,
    ModelSpec,
    Prompt,
    Unfinished,
    load_prompt,
    open_model,
)
from csts_pipeline.pipeline.records import require_current
from csts_pipeline.pipeline.schemas import MODEL_RATING_SCHEMA
from csts_pipeline.stages.annotate.crowd.files import read_jsonl, write_parquet
from csts_pipeline.stages.annotate.crowd.screening import Rating
from csts_pipeline.stages.annotate.layout import (
    CONDITIONS,
    INDIVIDUAL_RATINGS,
    RATINGS_TASKS,
    TASKS,
    model_dir,
    move_older_layout,
)

SCORES = "scores.parquet"  # a similarity model's raw scores beside its binned answers (similarity_rater.py)
UNIT_ITEMS = 8  # items per unit: the answers of a finished unit survive a killed run
DIGITS = ("1", "2", "3", "4", "5")
YES_NO = ("yes", "no")
QUESTIONS = {"pertinent": YES_NO, "rate": DIGITS}  # prompt name -> answer options
ITEM_FIELDS = ("sentence1", "sentence2", "condition")


def worker_id(model: LanguageModel) -> str:
    return f"model:{model.name}"


def rate(annotate_dir: Path, spec: ModelSpec | LanguageModel, *, force: bool = False) -> dict[str, Any]:
    """Rate every row of the ratings export with the model (`spec`, or a model already open); a no-op when
    model, prompts and items are unchanged, and answers already in the folder's cache are never asked again."""
    tasks_dir = annotate_dir / RATINGS_TASKS
    upstream = require_current(tasks_dir, "annotate export --stage ratings", {"conditions": annotate_dir / CONDITIONS})
    # a server is contacted here: an unreachable one fails before anything is written
    model = spec if isinstance(spec, LanguageModel) else open_model(spec)
    prompts = {name: load_prompt("csts_pipeline.stages.annotate", name) for name in QUESTIONS}
    params = {"model": model.identity, "prompts": {name: p.describe() for name, p in prompts.items()}}
    inputs = {"tasks": upstream["fingerprint"]}
    move_older_layout(annotate_dir)
    folder = model_dir(annotate_dir, worker_id(model))
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
        counts = {"items": len(items), **answer_counts(table), **cache.counts()}
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
    missing = counts["no_answer"]
    why = ", ".join(f"{n} {reason}" for reason, n in counts["no_answer_why"].items())
    return (
        f"{counts['answered']} of {counts['items']} items rated by {record['worker_id']} ({counts['not_pertinent']} "
        f"not pertinent), {missing} no answer{f' ({why})' if missing else ''} -> {record['files']['ratings']}\n"
        f"  read from: {counts['read_logprobs']} logprobs, {counts['read_samples']} samples; answers: "
        f"{counts['answers_computed']} asked, {counts['answers_cached']} from the cache; {cost['prompts']} prompts, "
        f"{cost['prompt_tokens']} prompt tokens, {cost['seconds']:.1f} s"
    )


def answer_counts(table: pa.Table) -> dict[str, Any]:
    """How many items have an answer, why the others have none, and how the answers were read."""
    rows = table.select(["no_answer", "not_pertinent", "read_mode", "pertinent_read_mode"]).to_pylist()
    reasons = [reason for row in rows if row["no_answer"] for reason in row["no_answer"].split("; ")]
    modes = [row[name] for row in rows for name in ("read_mode", "pertinent_read_mode")]
    return {
        "answered": sum(row["no_answer"] is None for row in rows),
        "not_pertinent": sum(bool(row["not_pertinent"]) for row in rows if row["no_answer"] is None),
        "no_answer": sum(row["no_answer"] is not None for row in rows),
        "no_answer_why": {reason: reasons.count(reason) for reason in sorted(set(reasons))},
        "read_logprobs": modes.count("logprobs"),
        "read_samples": modes.count("samples"),
    }


def ask(
    model: LanguageModel, prompts: dict[str, Prompt], items: list[dict[str, Any]], cache: AnswerCache
) -> list[dict[str, Answer]]:
    """Per item, the answer to each question; unit by unit, asking only what the cache lacks. A run stopped for
    good (its deadline, a failed request) first keeps every answer that came back (`save_unfinished`)."""
    found: list[dict[str, Answer]] = []
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
            try:
                answers = dict(enumerate(model.option_probs(chats, QUESTIONS[name]))) if chats else {}
            except Unfinished as exc:
                new |= {keyed[name][wanted[at]]: answer.row() for at, answer in exc.done.items()}
                cache.save_unfinished(unit, new)
                raise
            new |= {keyed[name][wanted[at]]: answer.row() for at, answer in answers.items()}
        if new:
            cache.save_unit(unit, new)
        for i in range(len(chunk)):
            found.append({name: Answer.from_row(cache.answers[keyed[name][i]]) for name in prompts})
    return found


def ratings_table(items: list[dict[str, Any]], answers: list[dict[str, Answer]], worker: str) -> pa.Table:
    """One row per item (schemas.MODEL_RATING_SCHEMA): the most likely digit, flagged when P(not pertinent) > 0.5,
    the whole distribution and how each answer was read; no rating where either question has no answer."""
    rows = []
    for item, answer in zip(items, answers):
        rate, pertinent = answer["rate"], answer["pertinent"]
        p_not = None if pertinent.probs is None else float(pertinent.probs[1])
        missing = "; ".join(f"{name}:{a.missing or 'no_answer'}" for name, a in answer.items() if a.probs is None)
        rows.append(
            {
                "item_id": item["item_id"],
                "worker_id": worker,
                "assignment_id": None,
                "rating": None if missing else int(np.argmax(rate.probs)) + 1,
                "not_pertinent": None if p_not is None else p_not > 0.5,
                "distribution": None if rate.probs is None else [round(float(p), 9) for p in rate.probs],
                "p_not_pertinent": None if p_not is None else round(p_not, 9),
                "no_answer": missing or None,
                **_how_read(rate, ""),
                **_how_read(pertinent, "pertinent_"),
            }
        )
    return pa.Table.from_pylist(rows, schema=MODEL_RATING_SCHEMA)


def _how_read(answer: Answer, prefix: str) -> dict[str, Any]:
    found = {"read_mode": answer.read_mode, "option_mass": answer.option_mass}
    found |= {"samples_asked": answer.samples_asked, "samples_readable": answer.samples_readable}
    return {prefix + name: value for name, value in found.items()}


# ------------------------------------------------------------------------------------ into the ratings import


@dataclass
class ModelAnswers:
    """The model rows for the ratings import: as accepted answers with their distributions (indexed into the
    rating tasks), the fingerprints that make the import depend on them, and what each model is (worker id ->
    model_folders.ModelRun.row)."""

    ratings: list[Rating] = field(default_factory=list)
    inputs: dict[str, str] = field(default_factory=dict)
    described: dict[str, dict[str, str]] = field(default_factory=dict)


def answers_of(
    table: pa.Table, rating_tasks: list[dict[str, Any]], inputs: dict[str, str], scores: pa.Table | None = None
) -> ModelAnswers:
    """Model rows (the ratings schema, as `annotate rate` writes them) as accepted answers indexed into
    `rating_tasks` by item id, each with its distribution q and P(not pertinent): the rater model weighs the
    answer by q, and the verdict by P. A row without a distribution is no answer and is left out; `rating` is
    q's most likely digit (also when flagged, so the gold check can score it). `scores` (a similarity model's
    scores.parquet): each row also carries its score, which the rater model reads whole (score_density.py)."""
    at = {task["item_id"]: i for i, task in enumerate(rating_tasks)}
    score = (
        {} if scores is None else dict(zip(scores.column("item_id").to_pylist(), scores.column("score").to_pylist()))
    )
    found = ModelAnswers(inputs=inputs)
    for row in table.to_pylist():
        item, q, p_not = at.get(row["item_id"]), row.get("distribution"), row.get("p_not_pertinent")
        if item is None or q is None or row.get("rating") is None or len(q) != len(DIGITS):
            continue  # another item, or no answer (never a rating)
        flagged = p_not is not None and p_not > 0.5  # p_not null: not asked (a similarity model)
        digit = None if flagged else int(np.argmax(q)) + 1
        p = None if p_not is None else float(p_not)
        found.ratings.append(
            Rating(
                item=item,
                worker=row["worker_id"],
                assignment="",
                rating=digit,
                not_pertinent=flagged,
                distribution=tuple(q),
                p_not_pertinent=p,
                score=score.get(row["item_id"]),
            )
        )
    return found
