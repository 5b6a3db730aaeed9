"""`annotate check-conditions FILE --model ...`: a language model asks of every condition in a C-STS file (or the
conditions import's conditions.parquet) whether it applies to both sentences and whether it names an attribute
rather than a value (Tu et al., 2024: the invalid conditions of C-STS), and lists the doubtful ones in
`doubtful.csv` with an empty `verdict` column for a person to fill. Answers are cached in the output folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.language_model import AnswerCache, Cost, LanguageModel, ModelSpec, load_prompt, open_model
from csts_pipeline.pipeline.records import file_fingerprint
from csts_pipeline.pipeline.shards import read_table
from csts_pipeline.stages.annotate.crowd.files import write_csv, write_parquet
from csts_pipeline.stages.annotate.steps.model_ratings import YES_NO
from csts_pipeline.stages.annotate.steps.options import ConditionCheckOptions

DOUBTFUL = "doubtful.csv"
CHECKED = "checked.parquet"
FIELDS = ("sentence1", "sentence2", "condition")
UNIT_ROWS = 16
CHECK_SCHEMA = pa.schema(
    [
        ("row", pa.int64()),
        *((name, pa.string()) for name in FIELDS),
        ("p_applies", pa.float64()),
        ("p_attribute", pa.float64()),
        ("doubt", pa.string()),  # does_not_apply, a_value, both, no_answer, or null
    ]
)


def read_conditions(path: Path) -> pa.Table:
    """The rows' sentences and conditions from a CSV or Parquet file; a file without them is a one-line error."""
    if not path.is_file():
        raise UserError(f"{path}: file not found")
    try:
        table = read_table(path) if path.suffix == ".parquet" else pacsv.read_csv(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise UserError(f"{path}: not a readable CSV or Parquet file ({str(exc).splitlines()[0]})") from None
    missing = [name for name in FIELDS if name not in table.column_names]
    if missing:
        raise UserError(f"{path}: no column(s) {', '.join(missing)}")
    return table.select(list(FIELDS)).cast(pa.schema([(name, pa.string()) for name in FIELDS]))


def check_conditions(
    path: Path,
    out_dir: Path,
    spec: ModelSpec | LanguageModel,
    *,
    below: float = ConditionCheckOptions.below,
    force: bool = False,
) -> dict[str, Any]:
    """Both questions for every row; a row is doubtful when either answer's P(yes) is below `below`."""
    if not 0 < below < 1:
        raise UserError(f"--below must be in (0, 1) (got {below})")
    rows = read_conditions(path).to_pylist()
    model = spec if isinstance(spec, LanguageModel) else open_model(spec)
    prompts = {name: load_prompt("csts_pipeline.stages.annotate", name) for name in ("pertinent", "attribute")}
    params = {"model": model.identity, "prompts": {n: p.describe() for n, p in prompts.items()}, "below": below}
    with OutputFolder("annotate-check-conditions", out_dir, params, {"file": file_fingerprint(path)}) as out:
        if out.up_to_date() and not force:
            return out.unchanged()
        out.begin(force)
        model.cost = Cost()  # this run's cost only (a model may be shared by several steps)
        cache = AnswerCache(out, model.identity)
        fields = {"pertinent": FIELDS, "attribute": ("condition",)}
        for unit, start in enumerate(range(0, len(rows), UNIT_ROWS)):
            chunk, new = rows[start : start + UNIT_ROWS], {}
            for name, prompt in prompts.items():
                keys = [cache.key(prompt, {f: row[f] for f in fields[name]}) for row in chunk]
                wanted = [i for i, k in enumerate(keys) if cache.get(k) is None and k not in new]
                chats = [prompt.chat(**{f: chunk[i][f] for f in fields[name]}) for i in wanted]
                new |= {keys[i]: answer.row() for i, answer in zip(wanted, _ask(model, chats))}
                for row, key in zip(chunk, keys):
                    probs = (new.get(key) or cache.answers[key])["probs"]
                    row[f"p_{name}"] = None if probs is None else float(probs[0])
            if new:
                cache.save_unit(unit, new)
        table = pa.Table.from_pylist([_checked(i, row, below) for i, row in enumerate(rows)], schema=CHECK_SCHEMA)
        doubtful = table.filter(pc.is_valid(table.column("doubt")))
        cache.write()
        write_parquet(table, out.staging / CHECKED)
        write_csv(doubtful.append_column("verdict", pa.array([""] * doubtful.num_rows)), out.staging / DOUBTFUL)
        no_answer = sum(row["p_pertinent"] is None or row["p_attribute"] is None for row in rows)
        counts = {"rows": len(rows), "doubtful": doubtful.num_rows, "no_answer": no_answer, **cache.counts()}
        return out.finish(
            counts,
            model=model.identity,
            prompts=params["prompts"],
            decoding=model.decoding(),
            cost=model.cost.record(),
            files={"doubtful": str(out.folder / DOUBTFUL), "checked": str(out.folder / CHECKED)},
        )


def _ask(model: LanguageModel, chats: list) -> list:
    return model.option_probs(chats, YES_NO) if chats else []


def _checked(index: int, row: dict[str, Any], below: float) -> dict[str, Any]:
    """A row's doubt: a question the model gave no answer to leaves it for the manual verdict (no_answer)."""
    p_applies, p_attribute = row["p_pertinent"], row["p_attribute"]
    if p_applies is None or p_attribute is None:
        doubt: str | None = "no_answer"
    else:
        applies, attribute = p_applies >= below, p_attribute >= below
        doubt = None if applies and attribute else "both" if not (applies or attribute) else "a_value"
        if doubt == "a_value" and not applies:
            doubt = "does_not_apply"
    return {
        "row": index,
        **{name: row[name] for name in FIELDS},
        "p_applies": None if p_applies is None else round(p_applies, 6),
        "p_attribute": None if p_attribute is None else round(p_attribute, 6),
        "doubt": doubt,
    }


def describe_check(record: dict[str, Any]) -> str:
    counts = record["counts"]
    return (
        f"{counts['rows']} conditions checked, {counts['doubtful']} doubtful ({counts.get('no_answer', 0)} with no "
        f"answer from the model) -> {record['files']['doubtful']} (fill its verdict column)\n  answers: "
        f"{counts['answers_computed']} asked, {counts['answers_cached']} from the cache; "
        f"{record['cost']['seconds']:.1f} s"
    )
