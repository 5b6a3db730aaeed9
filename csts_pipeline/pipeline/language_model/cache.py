"""`AnswerCache`: every answer a model gave, kept in the step's output folder and keyed by (model identity, prompt
id and digest, item), so a rerun asks nothing twice and a killed run resumes unit by unit.

It lives inside the step's `OutputFolder`: the committed `answers.parquet` holds the answers of earlier runs; each
finished unit of this run is written atomically to the staging folder's `_units/` (kept by `begin()` when an
interrupted run of the same output is resumed, dropped by the swap), and so are the answers of an unfinished unit
when a run stops for good (`save_unfinished`: a deadline passed, a request failed); `write()` puts the union into
the staging folder, committed with the rest. A failpoint `<stage>:unit:<n>` after each unit lets tests kill a
run there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from csts_pipeline.pipeline.commit import UNITS, OutputFolder
from csts_pipeline.pipeline.failpoints import failpoint
from csts_pipeline.pipeline.language_model.prompts import Prompt
from csts_pipeline.pipeline.records import fingerprint
from csts_pipeline.pipeline.shards import read_table, write_table

ANSWERS = "answers.parquet"
ANSWER_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("probs", pa.list_(pa.float64())),  # null: no answer (`missing` says why)
        ("text", pa.string()),
        # how an option answer was read (language_model.base.Answer); null for a generated text
        ("read_mode", pa.string()),
        ("option_mass", pa.float64()),
        ("samples_asked", pa.int64()),
        ("samples_readable", pa.int64()),
        ("missing", pa.string()),
        ("system_fingerprint", pa.string()),
    ]
)


class AnswerCache:
    """Answers by key: those committed, those of this run's finished units, and the new ones."""

    def __init__(self, out: OutputFolder, model: dict[str, Any]):
        self.out = out
        self.model_key = fingerprint(model)
        self.answers: dict[str, dict[str, Any]] = {}
        self.hits = 0
        self.computed = 0
        self._read(out.folder / ANSWERS)
        units = out.staging / UNITS
        for path in sorted(units.glob("*.parquet")) if units.is_dir() else []:
            self._read(path)

    def _read(self, path: Path) -> None:
        if not path.is_file():
            return
        try:
            rows = read_table(path).to_pylist()
        except Exception:  # a damaged cache is only a cache: ask again
            return
        self.answers.update((row["key"], row) for row in rows)

    def key(self, prompt: Prompt, item: dict[str, Any]) -> str:
        """The key of one question: the model, the prompt (its name, version and digest) and the item's fields."""
        return fingerprint({"model": self.model_key, "prompt": f"{prompt.id}:{prompt.digest}", "item": item})

    def get(self, key: str) -> dict[str, Any] | None:
        found = self.answers.get(key)
        if found is not None:
            self.hits += 1
        return found

    def save_unit(self, unit: int, answers: dict[str, dict[str, Any]]) -> None:
        """The answers of one finished unit, durable before the next unit starts."""
        self._save(answers, f"{unit:06d}.parquet")
        failpoint(f"{self.out.stage}:unit:{unit}")

    def save_unfinished(self, unit: int, answers: dict[str, dict[str, Any]]) -> None:
        """The answers a unit got before its run stopped for good (a deadline, a failed request), so the next run
        asks only the rest; each such stop of the unit keeps its own file."""
        if answers:
            kept = len(list((self.out.staging / UNITS).glob(f"{unit:06d}-unfinished-*.parquet")))
            self._save(answers, f"{unit:06d}-unfinished-{kept}.parquet")

    def _save(self, answers: dict[str, dict[str, Any]], file: str) -> None:
        rows: list[dict[str, Any]] = [
            {"key": key, **{name: a.get(name) for name in ANSWER_SCHEMA.names[1:]}} for key, a in answers.items()
        ]
        write_table(pa.Table.from_pylist(rows, schema=ANSWER_SCHEMA), self.out.staging / UNITS / file)
        self.answers.update((row["key"], row) for row in rows)
        self.computed += len(rows)

    def write(self) -> Path:
        """Every known answer into the staging folder's answers.parquet (committed with the step's output)."""
        rows = sorted(self.answers.values(), key=lambda row: row["key"])
        table = pa.Table.from_pylist(
            [{name: row.get(name) for name in ANSWER_SCHEMA.names} for row in rows], schema=ANSWER_SCHEMA
        )
        write_table(table, self.out.staging / ANSWERS)
        return self.out.staging / ANSWERS

    def counts(self) -> dict[str, int]:
        return {"answers_cached": self.hits, "answers_computed": self.computed}
