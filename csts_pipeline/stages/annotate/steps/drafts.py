"""Drafted conditions, a model in the loop: `annotate draft --stage conditions` asks a
language model for a high and a low condition per exported condition-writing task, passes each through the checks the
HIT page applies (non-empty, different, no "sentence", not a copy of a sentence, at most 80 characters) and asks the
model whether it applies to both sentences; the conditions export then puts the drafts that pass into the page as
prefilled, editable fields and into the Label Studio tasks as predictions; the conditions import records whether
each condition was a draft accepted, a draft edited (with the edit distance) or written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

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
from csts_pipeline.pipeline.records import fingerprint, read_record, require_record
from csts_pipeline.stages.annotate.crowd.files import read_jsonl, write_jsonl
from csts_pipeline.stages.annotate.layout import CONDITION_TYPES, CONDITIONS_TASKS, TASKS
from csts_pipeline.stages.annotate.steps.model_ratings import YES_NO
from csts_pipeline.stages.annotate.steps.options import DraftOptions

DRAFTS = "condition_drafts"  # <annotate>/condition_drafts/: what `annotate draft --stage conditions` wrote
DRAFTS_FILE = "drafts.jsonl"
MAX_CONDITION_CHARS = 80  # as the page's check (templates/_hit.js)
MAX_TOKENS = 16
UNIT_TASKS = 8
ORIGINS = ("drafted_accepted", "drafted_edited", "written")
_SENTENCE = re.compile(r"\bsentences?\b")


def tasks_key(tasks: list[dict[str, Any]]) -> str:
    """What drafts are drafted for: the tasks' ids and sentences (not the file, which carries the drafts later)."""
    return fingerprint([[t["task_id"], t["sentence1"], t["sentence2"]] for t in tasks])


def page_problem(text: str, other: str, sentences: tuple[str, str], is_low: bool) -> str | None:
    """The HIT page's check of one condition (templates/_hit.js, conditionProblem), or None when it passes."""
    value = " ".join(text.split()).lower()
    if not value:
        return "empty"
    if _SENTENCE.search(value):
        return "mentions_sentence"
    if value in (" ".join(s.split()).lower() for s in sentences):
        return "copies_sentence"
    if len(text.strip()) > MAX_CONDITION_CHARS:
        return "too_long"
    if is_low and value == " ".join(other.split()).lower():
        return "same_conditions"
    return None


def clean(answer: str) -> str:
    """A generated condition: the first sentence of its first non-empty line, without a label, quotes or list
    marks."""
    line = next((line for line in answer.splitlines() if line.strip()), "")
    line = re.sub(r"^\s*(?:[-*]|\d+[.)])?\s*(?:condition\s*:\s*)?", "", line, flags=re.I).strip().strip("\"'`")
    line = re.split(r"(?<=\.)\s", line, maxsplit=1)[0].strip("\"'` ")  # one phrase: the first sentence
    return line[:1].upper() + line[1:] if line else ""


def draft(
    annotate_dir: Path,
    spec: ModelSpec | LanguageModel,
    *,
    force: bool = False,
    min_applies: float = DraftOptions.min_applies,
) -> dict[str, Any]:
    """Drafts for every exported condition-writing task; a no-op when model, prompts and tasks are unchanged. A
    draft needs P(it applies to both sentences) of at least `min_applies` (0: the model's yes/no is not asked for
    a verdict, only recorded; for a model whose yes/no is biased)."""
    if not 0 <= min_applies < 1:
        raise UserError(f"--min-applies must be in [0, 1) (got {min_applies})")
    tasks_dir = annotate_dir / CONDITIONS_TASKS
    require_record(tasks_dir, "annotate export --stage conditions")
    model = spec if isinstance(spec, LanguageModel) else open_model(spec)
    prompts = {
        name: load_prompt("csts_pipeline.stages.annotate", name) for name in ("draft_high", "draft_low", "pertinent")
    }
    condition_tasks = read_jsonl(tasks_dir / TASKS)
    key = tasks_key(condition_tasks)
    params = {"model": model.identity, "prompts": {n: p.describe() for n, p in prompts.items()}, "tasks_key": key}
    params["min_applies"] = min_applies
    with OutputFolder("annotate-draft", annotate_dir / DRAFTS, params, {}, reads=(tasks_dir,)) as out:
        if out.up_to_date() and not force:
            return out.unchanged()
        out.begin(force)
        model.cost = Cost()  # this run's cost only (a model may be shared by several steps)
        cache = AnswerCache(out, model.identity)
        drafts = []
        for unit, start in enumerate(range(0, len(condition_tasks), UNIT_TASKS)):
            chunk = condition_tasks[start : start + UNIT_TASKS]
            drafts += _draft_unit(model, prompts, chunk=chunk, cache=cache, unit=unit, least=min_applies)
        cache.write()
        write_jsonl(drafts, out.staging / DRAFTS_FILE)
        counts: dict[str, Any] = {"tasks": len(drafts), **cache.counts()}
        for kind in CONDITION_TYPES:
            problems = [d[f"problem_{kind}"] for d in drafts]
            counts[f"drafted_{kind}"] = sum(p is None for p in problems)
            counts[f"rejected_{kind}"] = {p: problems.count(p) for p in sorted({p for p in problems if p})}
        return out.finish(
            counts,
            tasks_key=key,
            model=model.identity,
            prompts=params["prompts"],
            decoding=model.decoding() | {"max_tokens": MAX_TOKENS, "min_applies": min_applies},
            cost=model.cost.record(),
            files={"drafts": str(out.folder / DRAFTS_FILE)},
        )


def describe_drafts(record: dict[str, Any]) -> str:
    """What `annotate draft` did, as the command line prints it."""
    counts = record["counts"]
    kept = ", ".join(f"{counts[f'drafted_{kind}']} {kind}" for kind in CONDITION_TYPES)
    return (
        f"{counts['tasks']} tasks drafted: {kept} passed the checks -> {record['files']['drafts']}\n"
        f"  rejected: high {counts['rejected_high'] or 'none'}, low {counts['rejected_low'] or 'none'}\n"
        f"  next: annotate export --stage conditions (same options) puts them into the page"
    )


def _draft_unit(
    model: LanguageModel, prompts: dict[str, Prompt], *, chunk: list[dict], cache: AnswerCache, unit: int, least: float
) -> list[dict]:
    """Drafts of one unit of tasks: generated (or cached) text, the page's checks, then P(applies)."""
    new: dict[str, dict[str, Any]] = {}
    texts: dict[tuple[int, str], str] = {}
    for kind in CONDITION_TYPES:
        prompt = prompts[f"draft_{kind}"]
        keys = [cache.key(prompt, _pair(t)) for t in chunk]
        missing = [i for i, k in enumerate(keys) if cache.get(k) is None]
        answers = model.generate([prompt.chat(**_pair(chunk[i])) for i in missing], MAX_TOKENS) if missing else []
        new |= {keys[i]: {"text": answer} for i, answer in zip(missing, answers)}
        for i, k in enumerate(keys):
            texts[i, kind] = clean((new.get(k) or cache.answers[k])["text"])
    pertinent = prompts["pertinent"]
    asked = [(i, kind) for i in range(len(chunk)) for kind in CONDITION_TYPES if texts[i, kind]]
    keys = {(i, kind): cache.key(pertinent, _item(chunk[i], texts[i, kind])) for i, kind in asked}
    missing = [ik for ik in asked if cache.get(keys[ik]) is None and keys[ik] not in new]
    chats = [pertinent.chat(**_item(chunk[i], texts[i, kind])) for i, kind in missing]
    for ik, answer in zip(missing, model.option_probs(chats, YES_NO) if chats else []):
        new[keys[ik]] = answer.row()
    if new:
        cache.save_unit(unit, new)
    return [_draft_row(task, i, texts=texts, keys=keys, cache=cache, least=least) for i, task in enumerate(chunk)]


def _draft_row(task: dict, i: int, *, texts: dict, keys: dict, cache: AnswerCache, least: float) -> dict[str, Any]:
    row: dict[str, Any] = {"task_id": task["task_id"]}
    sentences = (task["sentence1"], task["sentence2"])
    for kind in CONDITION_TYPES:
        other = texts[i, "high" if kind == "low" else "low"]
        text = texts[i, kind]
        problem = page_problem(text, other, sentences, kind == "low")
        probs = cache.answers[keys[i, kind]]["probs"] if (i, kind) in keys else None
        p_applies = None if probs is None else float(probs[0])
        if problem is None and least > 0 and p_applies is None:
            problem = "no_answer"  # the model gave no yes/no: the verdict asked for is not there
        elif problem is None and p_applies is not None and p_applies < least:
            problem = "does_not_apply"
        row |= {f"draft_{kind}": text, f"p_applies_{kind}": p_applies, f"problem_{kind}": problem}
    return row


def _pair(task: dict) -> dict[str, str]:
    return {"sentence1": task["sentence1"], "sentence2": task["sentence2"]}


def _item(task: dict, condition: str) -> dict[str, str]:
    return {**_pair(task), "condition": condition}


# ---------------------------------------------------------------------------------- into the conditions export


def drafts_for(annotate_dir: Path, condition_tasks: list[dict[str, Any]]) -> dict[str, dict[str, str]] | None:
    """task id -> {high, low}: the drafts that passed every check, when `annotate draft` ran for these tasks
    (None when it never ran; drafts of other tasks are ignored)."""
    record = read_record(annotate_dir / DRAFTS)
    if record is None or record.get("tasks_key") != tasks_key(condition_tasks):
        return None
    found = {}
    for row in read_jsonl(annotate_dir / DRAFTS / DRAFTS_FILE):
        found[row["task_id"]] = {k: row[f"draft_{k}"] if row[f"problem_{k}"] is None else "" for k in CONDITION_TYPES}
    return found


def drafts_input(annotate_dir: Path) -> dict[str, str]:
    """The export's input from the drafts folder (empty when there is none)."""
    record = read_record(annotate_dir / DRAFTS)
    return {} if record is None else {"drafts": record["fingerprint"]}


def origin(written: str, drafted: str | None) -> tuple[str, int | None]:
    """How a submitted condition came about: drafted_accepted, drafted_edited (with the edit distance) or written."""
    if not drafted:
        return "written", None
    distance = edit_distance(" ".join(written.split()), " ".join(drafted.split()))
    return ("drafted_accepted", 0) if distance == 0 else ("drafted_edited", distance)


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance in characters."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]
