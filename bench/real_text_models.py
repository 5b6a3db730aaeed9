"""A similarity model with real skill, on real text, through the commands' own step functions (docs/annotate.md,
"A similarity model as a rater").

    python -m bench.real_text_models --pairs 300 --seeds 3 [--stsb ../shared/data/stsb/sts-test.csv]

Items: STS Benchmark pairs (real sentences, real gold scores rescaled to 1-5: 1 + 0.8 x score), taken through
`annotate export --stage conditions` (a kept CSV of the pairs), `import --stage conditions` (every pair gets two
neutral conditions, "The overall meaning." and "What the sentences say.", both with the pair's gold: STS-B has
no condition) and `export --stage ratings`. The model: the packaged all-MiniLM-L6-v2 through `annotate rate
--similarity-model` (its cosine under the condition, binned at the batch's quintiles); its errors are real.
People: simulated around the gold (tests/support/command_path.People: 20 workers, a quarter spammers, 15%
lenient, 15% harsh) with the harder shape, a shared per-item ambiguity (sd `--ambiguity`) and a per-item
difficulty (log-sd `--difficulty`). Every setting runs `import --stage ratings --aggregate model` and `export
--more` rounds on the files, as a user would.

Prints, as Markdown, per setting (mean over seeds, sd in brackets): Spearman with the gold overall and within each
STS-B genre (captions, forums, news), human ratings per item, 90% interval coverage, mean label error per genre,
the model's reliability (workers.parquet), and the human ratings saved against people with `--more`.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from scipy.stats import spearmanr

from bench.shared_data import SHARED
from csts_pipeline.stages import annotate
from csts_pipeline.stages.annotate.steps import similarity_rater
from tests.support.command_path import People, figures, label_with_people

STSB = SHARED / "data" / "stsb" / "sts-test.csv"
MODEL = "packaged:all-MiniLM-L6-v2"
CONDITIONS = ("The overall meaning.", "What the sentences say.")
ROUNDS = 6


def read_stsb(path: Path, n_pairs: int, seed: int) -> list[dict]:
    """`n_pairs` STS-B rows (genre, gold 0-5, sentences), a seeded sample in file order."""
    with path.open(encoding="utf-8", newline="") as handle:
        rows = [r for r in csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE) if len(r) >= 7]
    keep = np.sort(np.random.default_rng(seed).choice(len(rows), min(n_pairs, len(rows)), replace=False))
    return [
        {"genre": rows[i][0].removeprefix("main-"), "gold": float(rows[i][4]), "s1": rows[i][5], "s2": rows[i][6]}
        for i in keep
    ]


def kept_csv(pairs: list[dict], path: Path) -> Path:
    """The pairs as a kept file (the filter's columns; image ids are the row numbers)."""
    n = len(pairs)
    table = pa.table(
        {
            "pair_id": np.arange(n, dtype=np.int64),
            "image_id_1": np.arange(n, dtype=np.int64),
            "image_id_2": np.arange(n, dtype=np.int64) + n,
            "caption_id_1": 2 * np.arange(n, dtype=np.int64),
            "caption_id_2": 2 * np.arange(n, dtype=np.int64) + 1,
            "sentence1": [p["s1"] for p in pairs],
            "sentence2": [p["s2"] for p in pairs],
            "image_cosine": np.full(n, 0.5),
            "iou": np.full(n, 0.5),
            "simcse_cosine": np.full(n, 0.5),
            "ratio": np.ones(n),
            "length": np.array([min(len(p["s1"]), len(p["s2"])) for p in pairs]),
        }
    )
    pacsv.write_csv(table, path)
    return path


def prepared(pairs: list[dict], folder: Path) -> tuple[dict[str, float], dict[str, str]]:
    """conditions exported and imported, ratings exported; the truth and the genre per rating item id."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    annotate.export_conditions(
        folder, annotate.kept_source(None, kept_csv(pairs, folder.parent / "kept.csv")), len(pairs), 0, 1, False
    )
    tasks = [json.loads(line) for line in (folder / "conditions_tasks" / "tasks.jsonl").read_text().splitlines()]
    rows = [
        {
            "task_id": t["task_id"],
            "worker_id": f"C{n % 5}",
            "assignment_id": f"c-{n}",
            "condition_high": CONDITIONS[0],
            "condition_low": CONDITIONS[1],
        }
        for n, t in enumerate(tasks)
    ]
    results = folder.parent / "conditions.csv"
    with results.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    annotate.import_conditions(folder, [results], False)
    annotate.export_ratings(folder, 0, False)
    triplets = pq.read_table(folder / "conditions" / "conditions.parquet").to_pylist()
    truth = {t["item_id"]: 1 + 0.8 * pairs[t["pair_id"]]["gold"] for t in triplets}
    genre = {t["item_id"]: pairs[t["pair_id"]]["genre"] for t in triplets}
    return truth, genre


def model_reliability(folder: Path) -> float | None:
    """The model worker's reliability in workers.parquet (None without a model)."""
    rows = pq.read_table(folder / "ratings" / "workers.parquet").to_pylist()
    found = [r["reliability"] for r in rows if r["worker_id"].startswith("model:")]
    return found[0] if found else None


Setting = tuple[bool, int, int]  # with the model, human ratings an item at first, follow-up rounds


SETTINGS: dict[str, Setting] = {
    "people, fixed 3": (False, 3, 0),
    "people, fixed 5": (False, 5, 0),
    "people, 2 then --more": (False, 2, ROUNDS),
    "people + MiniLM, fixed 2": (True, 2, 0),
    "people + MiniLM, 1 then --more": (True, 1, ROUNDS),
    "people + MiniLM, 2 then --more": (True, 2, ROUNDS),
}


def run_setting(base: dict[bool, Path], setting: Setting, people: People, kinds: dict, work: Path, seed: int) -> dict:
    """One labelling run on a fresh copy of the prepared folder (with the model's rows or without)."""
    with_model, start, rounds = setting
    folder = work / f"run-{seed}-{int(with_model)}-{start}-{rounds}" / "annotate"
    shutil.rmtree(folder.parent, ignore_errors=True)
    shutil.copytree(base[with_model], folder)
    outcome = label_with_people(folder, people, start, rounds, folder.parent / "results", seed)
    found = figures(folder, people.truth, kinds)
    found["human_per_item"] = outcome.human_ratings / len(people.truth)
    found["model_reliability"] = model_reliability(folder)
    shutil.rmtree(folder.parent)
    return found


def cell(values: list) -> str:
    values = [v for v in values if v is not None]
    return f"{np.mean(values):.3f} ({np.std(values):.3f})" if values else "-"


def table(found: dict[str, list[dict]], genres: list[str]) -> list[str]:
    columns = ["spearman", *(f"spearman[{g}]" for g in genres), "human_per_item", "coverage"]
    columns += [*(f"error[{g}]" for g in genres), "model_reliability"]
    lines = ["| setting | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for name, runs in found.items():
        lines.append(f"| {name} | " + " | ".join(cell([r.get(c) for r in runs]) for c in columns) + " |")
    return lines


def savings(found: dict[str, list[dict]]) -> list[str]:
    """Per setting with the model: human ratings saved against people with `--more`, and whether it reached
    their Spearman (mean over seeds)."""
    ref = found["people, 2 then --more"]
    ref_rho, ref_cost = np.mean([r["spearman"] for r in ref]), np.mean([r["human_per_item"] for r in ref])
    lines = []
    for name, runs in found.items():
        if "MiniLM" not in name:
            continue
        rho, cost = np.mean([r["spearman"] for r in runs]), np.mean([r["human_per_item"] for r in runs])
        lines.append(
            f"- {name}: {1 - cost / ref_cost:+.1%} human ratings against people, 2 then --more "
            f"({cost:.2f} vs {ref_cost:.2f} an item); Spearman {rho:.3f} vs {ref_rho:.3f}"
            f" ({'reached' if rho >= ref_rho - 1e-9 else 'not reached'})"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stsb", type=Path, default=STSB)
    parser.add_argument("--pairs", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--ambiguity", type=float, default=0.4)
    parser.add_argument("--difficulty", type=float, default=0.3)
    parser.add_argument("--settings", default="", help="setting names separated by ; (default: all)")
    args = parser.parse_args()
    pairs = read_stsb(args.stsb, args.pairs, 0)
    chosen = {k: v for k, v in SETTINGS.items() if not args.settings or k in args.settings.split(";")}
    with tempfile.TemporaryDirectory(prefix="real-text-") as tmp:
        work = Path(tmp)
        base = {False: work / "base" / "annotate"}
        truth, genre = prepared(pairs, base[False])
        base[True] = work / "model" / "annotate"
        shutil.copytree(base[False], base[True])
        record = similarity_rater.rate_similarity(base[True], MODEL, batch_size=32, device="cpu")
        scores = pq.read_table(base[True] / "model_ratings" / "scores.parquet").to_pylist()
        alone = spearmanr([s["score"] for s in scores], [truth[s["item_id"]] for s in scores]).statistic
        print(
            f"{len(pairs)} STS-B pairs ({len(truth)} items) from {args.stsb}; people: ambiguity sd "
            f"{args.ambiguity}, difficulty log-sd {args.difficulty}; {args.seeds} seeds"
        )
        print(f"MiniLM alone (cosine under the condition): Spearman {alone:.3f}; bin edges {record['bin_edges']}\n")
        found: dict[str, list[dict]] = {name: [] for name in chosen}
        for seed in range(args.seeds):
            people = People.around(truth, seed, ambiguity=args.ambiguity, difficulty=args.difficulty)
            for name, setting in chosen.items():
                found[name].append(run_setting(base, setting, people, genre, work, seed))
                print(f"  seed {seed} {name}: {found[name][-1]}", flush=True)
        print("\n".join(table(found, sorted(set(genre.values())))))
        if "people, 2 then --more" in found:
            print("\n".join(savings(found)))


if __name__ == "__main__":
    main()
