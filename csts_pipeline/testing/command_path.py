"""Simulated people answering the files the annotate commands write, through the step functions the CLI calls:
`export --stage ratings`'s tasks, `import --stage ratings --aggregate model`, `export --more` and its exclude
list, the import again with every results file. For the annotate benches (real text with simulated models, models
in the loop) and the tests; nothing here builds the import's arrays by hand.

`People` holds a known truth per item id (a real number on 1-5) and a crowd of worker kinds (simulate.py's
careful, lenient, harsh and spammer), with the harder shapes of issue 46: a shared per-item ambiguity (a shift
every rater of the item feels, `shift`) and a per-item difficulty (a factor on everyone's noise, `scale`)."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from scipy.stats import spearmanr

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.annotate.crowd.kept import kept_source
from csts_pipeline.stages.annotate.steps import followup
from csts_pipeline.stages.annotate.steps.conditions import export_conditions, import_conditions
from csts_pipeline.stages.annotate.steps.options import ConditionsExportOptions, RatingsImportOptions
from csts_pipeline.stages.annotate.steps.ratings import export_ratings, import_ratings
from csts_pipeline.testing.simulate import SHIFT, crowd_workers

NOISE = 0.6  # a careful worker's sd, as simulate.py


@dataclass
class People:
    """A simulated crowd around `truth` (item id -> 1-5); `shift` and `scale` per item id (default 0 and 1)."""

    truth: dict[str, float]
    kind: dict[str, str]  # worker id -> kind
    bad: set[str] = field(default_factory=set)
    shift: dict[str, float] = field(default_factory=dict)
    scale: dict[str, float] = field(default_factory=dict)

    @classmethod
    def around(
        cls,
        truth: dict[str, float],
        seed: int,
        n_workers: int = 20,
        spam: float = 0.25,
        lenient: float = 0.15,
        harsh: float = 0.15,
        ambiguity: float = 0.0,
        difficulty: float = 0.0,
        bad_share: float = 0.0,
    ) -> People:
        """People with the shares of simulate.simulate_crowd; `ambiguity`: sd of the shared per-item shift;
        `difficulty`: sd of the log of the per-item noise factor."""
        rng = np.random.default_rng(seed + 31)
        ids = sorted(truth)
        shift = dict(zip(ids, rng.normal(0, ambiguity, len(ids)).tolist()))
        scale = dict(zip(ids, np.exp(rng.normal(0, difficulty, len(ids))).tolist()))
        bad = {i for i, b in zip(ids, rng.random(len(ids)) < bad_share) if b}
        return cls(truth, crowd_workers(n_workers, spam, lenient, harsh), bad, shift, scale)

    def answer(self, item_ids: list[str], workers: list[str], rng: np.random.Generator) -> list[dict[str, Any]]:
        """One results row per (item, worker): the truth plus the item's shift, the worker's bias and noise scaled
        by the item's difficulty, rounded and clipped; a spammer uniform; flags as simulate.flags."""
        truth = np.array([self.truth[i] + self.shift.get(i, 0.0) for i in item_ids])
        scale = np.array([self.scale.get(i, 1.0) for i in item_ids])
        kinds = np.array([self.kind[w] for w in workers])
        bias = np.array([SHIFT[k] for k in kinds])
        honest = np.clip(np.rint(truth + bias + rng.normal(0, NOISE, len(truth)) * scale), 1, 5)
        rating = np.where(kinds == "spammer", rng.integers(1, 6, len(truth)), honest).astype(int)
        bad = np.array([i in self.bad for i in item_ids])
        flagged = rng.random(len(truth)) < np.where(kinds == "spammer", 0.3, np.where(bad, 0.85, 0.04))
        return [
            {"item_id": i, "worker_id": w, "rating": "" if f else int(r), "not_pertinent": "true" if f else "false"}
            for i, w, r, f in zip(item_ids, workers, rating, flagged)
        ]


def write_results(path: Path, rows: list[dict[str, Any]]) -> Path:
    """A plain results CSV (the rating HIT's answer columns)."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, ["item_id", "worker_id", "assignment_id", "rating", "not_pertinent"])
        writer.writeheader()
        writer.writerows({**row, "assignment_id": f"{path.stem}-{n}"} for n, row in enumerate(rows))
    return path


def jsonl(path: Path) -> list[dict[str, Any]]:
    """A JSON lines file, split at newlines only: str.splitlines would also split inside a text holding a line
    separator (U+2028, as two USTS-U sentences do), which json.dumps writes as is."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def task_ids(folder: Path) -> list[str]:
    return [row["item_id"] for row in jsonl(folder / "tasks.jsonl")]


def first_batch(annotate_dir: Path, people: People, per_item: int, out: Path, seed: int) -> Path:
    """`per_item` distinct workers rate every exported task (hidden controls included)."""
    rng = np.random.default_rng(seed)
    ids = task_ids(annotate_dir / "ratings_tasks")
    names = np.array(list(people.kind))
    chosen = np.argsort(rng.random((len(ids), len(names))), axis=1)[:, :per_item]
    items = [i for i in ids for _ in range(per_item)]
    return write_results(out, people.answer(items, names[chosen.reshape(-1)].tolist(), rng))


def follow_up(annotate_dir: Path, people: People, given: list[Path], out: Path, seed: int) -> Path | None:
    """`annotate export --more`, then one more rating on each item it asks for, by a worker who has not rated it
    and is not on its exclude list; None when no item needs more."""
    try:
        followup.export_more(annotate_dir, force=True)
    except UserError as exc:
        if "no item needs more ratings" in str(exc):
            return None
        raise
    more = annotate_dir / followup.RATINGS_MORE
    with (more / followup.EXCLUDE).open(newline="") as handle:
        excluded = {row["worker_id"] for row in csv.DictReader(handle)}
    rated: set[tuple[str, str]] = set()
    for path in given:
        with path.open(newline="") as handle:
            rated |= {(row["item_id"], row["worker_id"]) for row in csv.DictReader(handle)}
    rng = np.random.default_rng(seed)
    names = [w for w in people.kind if w not in excluded]
    items, workers = [], []
    for item in task_ids(more):
        free = [w for w in (names[j] for j in rng.permutation(len(names))) if (item, w) not in rated]
        if free:
            items.append(item)
            workers.append(free[0])
    return write_results(out, people.answer(items, workers, rng)) if items else None


def import_model(
    annotate_dir: Path, results: list[Path], ambiguity_sd: float | None = None, expert: Path | None = None
) -> dict[str, Any]:
    """`annotate import --stage ratings --aggregate model [--ambiguity-sd] [--expert]` over every results file."""
    return import_ratings(
        annotate_dir,
        results,
        RatingsImportOptions(aggregate="model", ambiguity_sd=ambiguity_sd, expert=expert),
        force=True,
    )


@dataclass
class Outcome:
    """What a labelling run bought and gave: the human ratings (rows of the results files) and the import."""

    results: list[Path]
    human_ratings: int
    rounds: int
    record: dict[str, Any]
    trace: list[tuple[int, Any]] = field(default_factory=list)  # (human ratings so far, `after`'s value) per import


def label_with_people(
    annotate_dir: Path,
    people: People,
    start: int,
    rounds: int,
    scratch: Path,
    seed: int,
    after: Callable[[Path], Any] | None = None,
    ambiguity_sd: float | None = None,
    expert: Path | None = None,
) -> Outcome:
    """People give `start` ratings an item, the import runs, then up to `rounds` follow-up batches, each
    imported with all before it. A model's rows (`annotate rate` into annotate_dir) enter every import.
    `after(annotate_dir)` runs after each import; the trace keeps its value with the human ratings so far.
    `ambiguity_sd`: the import's `--ambiguity-sd` (None: chosen from the answers); `expert`: its `--expert`."""
    scratch.mkdir(parents=True, exist_ok=True)
    results = [first_batch(annotate_dir, people, start, scratch / f"batch0-s{seed}.csv", seed)]
    record = import_model(annotate_dir, results, ambiguity_sd, expert)
    trace = [(rows_in(results), after(annotate_dir))] if after else []
    done = 0
    for done in range(1, rounds + 1):
        more = follow_up(annotate_dir, people, results, scratch / f"batch{done}-s{seed}.csv", seed * 1000 + done)
        if more is None:
            done -= 1
            break
        results.append(more)
        record = import_model(annotate_dir, results, ambiguity_sd, expert)
        if after:
            trace.append((rows_in(results), after(annotate_dir)))
    return Outcome(results, rows_in(results), done, record, trace)


def rows_in(results: list[Path]) -> int:
    """Human answers bought: the rows of the results files."""
    total = 0
    for path in results:
        with path.open(newline="") as handle:
            total += sum(1 for _ in csv.DictReader(handle))
    return total


def figures(annotate_dir: Path, truth: dict[str, float], kinds: dict[str, str] | None = None) -> dict[str, Any]:
    """From the import's items.parquet: Spearman of the labels with the truth over the labelled items (and
    within each kind of item), 90% interval coverage of the rounded truth, mean label error per kind."""
    items = pq.read_table(annotate_dir / "ratings" / "items.parquet").to_pylist()
    rows = [r for r in items if r["label"] is not None and r["item_id"] in truth]
    label = np.array([r["label"] for r in rows])
    true = np.array([truth[r["item_id"]] for r in rows])
    low = np.array([r["interval_low"] for r in rows], float)
    high = np.array([r["interval_high"] for r in rows], float)
    rounded = np.clip(np.rint(true), 1, 5)
    kind = np.array([(kinds or {}).get(r["item_id"], "all") for r in rows])
    found: dict[str, Any] = {
        "spearman": float(spearmanr(label, true).statistic),
        "coverage": float(np.mean((low <= rounded) & (rounded <= high))),
        "labelled": len(rows),
    }
    for name in sorted(set(kind.tolist())):
        on = kind == name
        found[f"spearman[{name}]"] = float(spearmanr(label[on], true[on]).statistic) if on.sum() > 2 else None
        found[f"error[{name}]"] = float(np.mean(label[on] - true[on]))
        found[f"coverage[{name}]"] = float(np.mean((low[on] <= rounded[on]) & (rounded[on] <= high[on])))
    return found


CONDITIONS = ("The overall meaning.", "What the sentences say.")  # the written conditions, high then low


def kept_csv(pairs: list[tuple[str, str]], path: Path) -> Path:
    """Sentence pairs as a kept file (the filter's columns; image and caption ids are row numbers)."""
    n = len(pairs)
    rows = np.arange(n, dtype=np.int64)
    table = pa.table(
        {
            "pair_id": rows,
            "image_id_1": rows,
            "image_id_2": rows + n,
            "caption_id_1": 2 * rows,
            "caption_id_2": 2 * rows + 1,
            "sentence1": [a for a, _ in pairs],
            "sentence2": [b for _, b in pairs],
            "image_cosine": np.full(n, 0.5),
            "iou": np.full(n, 0.5),
            "simcse_cosine": np.full(n, 0.5),
            "ratio": np.ones(n),
            "length": np.array([min(len(a), len(b)) for a, b in pairs]),
        }
    )
    pacsv.write_csv(table, path)
    return path


def prepare_folder(pairs: list[tuple[str, str]], folder: Path, conditions: tuple[str, str] = CONDITIONS) -> dict:
    """An annotate folder taken through `export --stage conditions` (every pair), a conditions results file (one
    writer a pair writing `conditions`, high then low), `import --stage conditions` and `export --stage
    ratings`. Returns item id -> (pair index, condition type)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    source = kept_source(None, kept_csv(pairs, folder.parent / "kept.csv"))
    export_conditions(folder, source, ConditionsExportOptions(n=len(pairs), bins=1))
    tasks = jsonl(folder / "conditions_tasks" / "tasks.jsonl")
    path = folder.parent / "conditions.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, ["task_id", "worker_id", "assignment_id", "condition_high", "condition_low"])
        writer.writeheader()
        for n, task in enumerate(tasks):
            writer.writerow(
                {
                    "task_id": task["task_id"],
                    "worker_id": f"C{n % 5}",
                    "assignment_id": f"c-{n}",
                    "condition_high": conditions[0],
                    "condition_low": conditions[1],
                }
            )
    import_conditions(folder, [path])
    export_ratings(folder)
    triplets = pq.read_table(folder / "conditions" / "conditions.parquet").to_pylist()
    return {t["item_id"]: (int(t["pair_id"]), t["condition_type"]) for t in triplets}
