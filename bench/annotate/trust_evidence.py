"""Trust from evidence on real text: one person an item and a real similarity model, with and without an expert
sample (trust from evidence).

    python -m bench.annotate.trust_evidence --pairs 300 --seeds 3 [--noise 0.8] [--careless 0.45] [--expert-share 0.05]
    python -m bench.annotate.trust_evidence --pairs 1000 --seeds 3 [--repeat-items 100]

Items: STS Benchmark pairs (real sentences, gold rescaled to 1-5: 1 + 0.8 x score) through `annotate export
--stage conditions`, `import --stage conditions` (two neutral conditions a pair) and `export --stage ratings`,
as bench/annotate/real_text_models.py; the model: the packaged all-MiniLM-L6-v2 through `annotate rate
--similarity-model` (its real errors). People: `--workers` (default 4) simulated people, one rating an item, each with a
bias of its own (sd 0.3), noise sd `--noise` and a `--careless` share of answers at random, so that one person's
Spearman with the gold is about 0.5 (the real crowd's level in C-STS). Every run is `annotate import --stage ratings
--aggregate model` through the step function, without and with `--expert` (a file of `item_id,label` with the
gold of a seeded `--expert-share` of the items), and with a repeat sample instead (`--repeat-items`, default 100:
that many items rated by two more of the same people, the C-STS paper's agreement sample; figures outside them).

Prints, per run and as means over seeds, the Spearman with the gold on the items outside the expert sample of:
the person alone, the model's score alone, the even blend of the two each standardised (of the score, and of
its bins), the import's labels, and the same import's labels with the model read by its quintile bins alone
(`bins_labels`: its scores withheld from the rater model, through the import's label_batch); and each worker's
reliability as workers.parquet reports it beside its Spearman with the gold on those items, and its evidence; with
the sample, the people's and the model's Spearman on the sample's own items (the evidence's sampling error)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from scipy.stats import spearmanr

from bench.annotate.real_text_models import MODEL, STSB, prepared, read_stsb
from csts_pipeline.stages.annotate.crowd import screening
from csts_pipeline.stages.annotate.crowd.files import read_jsonl
from csts_pipeline.stages.annotate.steps import model_folders, similarity_rater
from csts_pipeline.stages.annotate.steps.options import RatingsImportOptions
from csts_pipeline.stages.annotate.steps.ratings import import_ratings, label_batch
from csts_pipeline.testing.command_path import task_ids, write_results


def one_person_an_item(
    truth: dict[str, float], ids: list[str], workers: int, noise: float, careless: float, seed: int
) -> list[dict]:
    """Every item rated once, by one of `workers` people, each with a steady bias and the same noise, and a
    `careless` share of answers at random (a real crowd's lapses: a misread condition, a hurried click)."""
    rng = np.random.default_rng(seed)
    bias = rng.normal(0, 0.3, workers)
    who = rng.integers(0, workers, len(ids))
    return answers(truth, ids, who, bias, noise, careless, rng)


def answers(truth: dict, ids: list[str], who: np.ndarray, bias: np.ndarray, noise: float, careless: float,
            rng: np.random.Generator) -> list[dict]:  # fmt: skip
    """Person `who[n]` (with `bias[who[n]]`) rates item `ids[n]`: the truth, their bias and noise, rounded to 1-5,
    a `careless` share at random."""
    raw = np.array([truth[i] for i in ids]) + bias[who] + rng.normal(0, noise, len(ids))
    rating = np.clip(np.rint(raw), 1, 5).astype(int)
    rating = np.where(rng.random(len(ids)) < careless, rng.integers(1, 6, len(ids)), rating)
    return [{"item_id": i, "worker_id": f"p{w}", "rating": int(r), "not_pertinent": "false"}
            for i, w, r in zip(ids, who, rating)]  # fmt: skip


def repeat_sample(truth: dict, rows: list[dict], items: int, workers: int, noise: float, careless: float,
                  seed: int) -> tuple[list[dict], set[str]]:  # fmt: skip
    """The C-STS paper's agreement sample: `items` of the batch rated by two more of the same people (the ones
    one_person_an_item drew with `seed`), each other than the item's first; the extra rows and the items."""
    bias = np.random.default_rng(seed).normal(0, 0.3, workers)
    rng = np.random.default_rng(seed + 2000)
    picked = [rows[n] for n in rng.choice(len(rows), min(items, len(rows)), replace=False)]
    ids, who = [], []
    for row in picked:
        others = [w for w in range(workers) if f"p{w}" != row["worker_id"]]
        ids += [row["item_id"]] * 2
        who += rng.choice(others, 2, replace=False).tolist()
    return answers(truth, ids, np.array(who), bias, noise, careless, rng), {r["item_id"] for r in picked}


def standard(x: np.ndarray) -> np.ndarray:
    return (x - x.mean()) / (x.std() or 1.0)


def run(folder: Path, rows: list[dict], truth: dict, scores: dict, expert: Path | None, held: set[str]) -> dict:
    """One import through the step function; figures on the items outside `held` (the expert sample)."""
    results = write_results(folder.parent / "results.csv", rows)
    record = import_ratings(folder, [results], RatingsImportOptions(aggregate="model", expert=expert), force=True)
    items = pq.read_table(folder / "ratings" / "items.parquet").to_pylist()
    label = {r["item_id"]: r["label"] for r in items if r["label"] is not None}
    found = figures(label, rows, truth, scores, held)
    found["bins_labels"] = figures(bins_only(folder, results, expert), rows, truth, scores, held)["labels"]
    workers = pq.read_table(folder / "ratings" / "workers.parquet").to_pylist()
    ids = [i for i in label if i not in held and i in scores]
    gold = np.array([truth[i] for i in ids])
    found["workers"] = [worker_row(w, ids, gold, rows, scores) for w in workers]
    found["summary"] = record
    return found


def bins_only(folder: Path, results: Path, expert: Path | None) -> dict[str, float]:
    """The same import's labels with the model's answers read as their quintile bins alone (its scores not
    given to the rater model), through the import's own label_batch."""
    tasks_all = read_jsonl(folder / "ratings_tasks" / "tasks.jsonl")
    _, people = screening.screen_ratings(tasks_all, [results], folder / "ratings_tasks" / "tasks.jsonl")
    runs = model_folders.current_runs(folder, None)
    models = [r._replace(score=None) for r in model_folders.model_answers(runs, tasks_all).ratings]
    done = label_batch(tasks_all, people, models, "model", expert=expert)
    return {item["item_id"]: float(v) for item, v in zip(done.items, done.labels.label) if np.isfinite(v)}


def figures(label: dict[str, float], rows: list[dict], truth: dict, scores: dict, held: set[str]) -> dict:
    """Spearman with the gold on the items outside `held`: the person, the model's score, the two even blends
    (score, bins) and the labels."""
    ids = [i for i in label if i not in held and i in scores]
    gold = np.array([truth[i] for i in ids])
    person = {r["item_id"]: r["rating"] for r in rows}
    score = np.array([scores[i][0] for i in ids])
    bins = np.array([scores[i][1] for i in ids], float)
    mine = np.array([person[i] for i in ids], float)
    rho = lambda x: float(spearmanr(x, gold).statistic)  # noqa: E731
    return {
        "person": rho(mine),
        "model": rho(score),
        "blend": rho(standard(mine) + standard(score)),
        "blend_bins": rho(standard(mine) + standard(bins)),
        "labels": rho(np.array([label[i] for i in ids])),
    }


def sample_words(rows: list[dict], truth: dict, scores: dict, held: set[str]) -> str:
    """The evidence's own figures: the people's and the model's Spearman with the gold on the sample's items,
    beside the same on the others (what a reliability measured on the sample can at best reach)."""
    person = {r["item_id"]: r["rating"] for r in rows}
    parts = []
    for name, ids in (("sample", sorted(held & scores.keys())), ("others", sorted(scores.keys() - held))):
        gold = [truth[i] for i in ids]
        people = spearmanr([person[i] for i in ids], gold).statistic
        model = spearmanr([scores[i][0] for i in ids], gold).statistic
        parts.append(f"{name} ({len(ids)}): people {people:.3f}, model {model:.3f}")
    return "    the sample's own Spearman with the gold: " + "; ".join(parts)


def worker_row(worker: dict, ids: list[str], gold: np.ndarray, rows: list[dict], scores: dict) -> dict:
    """A worker's reported reliability and evidence beside its Spearman with the gold on `ids`."""
    name = worker["worker_id"]
    if name.startswith("model:"):
        theirs = np.array([scores[i][0] for i in ids])
        mask = np.ones(len(ids), bool)
    else:
        by = {r["item_id"]: r["rating"] for r in rows if r["worker_id"] == name}
        mask = np.array([i in by for i in ids])
        theirs = np.array([by.get(i, 0) for i in ids], float)
    truth_rho = float(spearmanr(theirs[mask], gold[mask]).statistic) if mask.sum() > 2 else float("nan")
    return {"worker": name, "reliability": worker["reliability"], "spearman": truth_rho, "n": int(mask.sum()),
            "evidence": worker["evidence"]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stsb", type=Path, default=STSB)
    parser.add_argument("--pairs", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--noise", type=float, default=0.8)
    parser.add_argument("--careless", type=float, default=0.45)
    parser.add_argument("--expert-share", type=float, default=0.05)
    parser.add_argument("--repeat-items", type=int, default=100,
                        help="the repeat sample's items, each rated by two more people (0: no such run)")  # fmt: skip
    args = parser.parse_args()
    pairs = read_stsb(args.stsb, args.pairs, 0)
    with tempfile.TemporaryDirectory(prefix="trust-") as tmp:
        folder = Path(tmp) / "annotate"
        truth, _ = prepared(pairs, folder)
        record = similarity_rater.rate_similarity(folder, MODEL, batch_size=32, device="cpu")
        table = pq.read_table(record["files"]["scores"]).to_pylist()
        scores = {r["item_id"]: (r["score"], r["bin"]) for r in table}
        ids = task_ids(folder / "ratings_tasks")
        print(
            f"{len(pairs)} STS-B pairs ({len(ids)} items), {args.workers} people, one rating an item, noise sd "
            f"{args.noise}, {args.careless:.0%} careless; expert sample {args.expert_share:.0%}; {args.seeds} seeds\n"
        )
        totals: dict[str, list[dict]] = {"no evidence": [], "expert sample": [], "repeat sample": []}
        for seed in range(args.seeds):
            rows = one_person_an_item(truth, ids, args.workers, args.noise, args.careless, seed)
            rng = np.random.default_rng(seed + 1000)
            held = set(rng.choice(ids, max(1, round(args.expert_share * len(ids))), replace=False).tolist())
            expert = Path(tmp) / "expert.csv"
            expert.write_text("item_id,label\n" + "".join(f"{i},{truth[i]:.2f}\n" for i in sorted(held)))
            extra, repeated = repeat_sample(truth, rows, args.repeat_items, args.workers, args.noise, args.careless,
                                            seed)  # fmt: skip
            arms = [("no evidence", rows, None, held), ("expert sample", rows, expert, held)]
            arms += [("repeat sample", rows + extra, None, repeated)] if args.repeat_items else []
            for name, given_rows, given, outside in arms:
                found = run(folder, given_rows, truth, scores, given, outside)
                totals[name].append(found)
                print(f"seed {seed}, {name}: " + ", ".join(f"{k} {found[k]:.3f}" for k in FIGURES))
                if given is not None:
                    print(sample_words(rows, truth, scores, held))
                for w in found["workers"]:
                    print(f"    {w['worker']}: reliability {w['reliability']}, Spearman {w['spearman']:.3f} on "
                          f"{w['n']} ({w['evidence']})")  # fmt: skip
        print("\n| run | " + " | ".join(FIGURES) + " |\n|---|" + "---:|" * len(FIGURES))
        for name, runs in totals.items():
            if runs:
                print(f"| {name} | " + " | ".join(f"{np.mean([r[k] for r in runs]):.3f}" for k in FIGURES) + " |")


FIGURES = ("person", "model", "blend", "blend_bins", "labels", "bins_labels")

if __name__ == "__main__":
    main()
