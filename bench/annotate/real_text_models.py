"""A similarity model with real skill, on real text, through the commands' own step functions: a
similarity model as a rater (`annotate rate --similarity-model`).

    python -m bench.annotate.real_text_models --pairs 300 --seeds 3 [--stsb ../shared/data/stsb/sts-test.csv]
    [--ambiguity-sd SD]

Items: STS Benchmark pairs (real sentences, real gold scores rescaled to 1-5: 1 + 0.8 x score), taken through
`annotate export --stage conditions` (a kept CSV of the pairs), `import --stage conditions` (every pair gets two
neutral conditions, "The overall meaning." and "What the sentences say.", both with the pair's gold: STS-B has
no condition) and `export --stage ratings`. The model: the packaged all-MiniLM-L6-v2 through `annotate rate
--similarity-model` (its cosine under the condition, binned at the batch's quintiles); its errors are real.
People: simulated around the gold (testing.command_path.People: 20 workers, a quarter spammers, 15%
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
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from scipy.stats import spearmanr

from bench.shared_data import SHARED
from csts_pipeline.stages.annotate.steps import similarity_rater
from csts_pipeline.testing.command_path import People, figures, label_with_people, prepare_folder

STSB = SHARED / "data" / "stsb" / "sts-test.csv"
MODEL = "packaged:all-MiniLM-L6-v2"
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


def prepared(pairs: list[dict], folder: Path) -> tuple[dict[str, float], dict[str, str]]:
    """The annotate folder through conditions and the ratings export; the truth and the genre per item id."""
    items = prepare_folder([(p["s1"], p["s2"]) for p in pairs], folder)
    truth = {item: 1 + 0.8 * pairs[pair]["gold"] for item, (pair, _) in items.items()}
    return truth, {item: pairs[pair]["genre"] for item, (pair, _) in items.items()}


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


def run_setting(
    base: dict[bool, Path],
    setting: Setting,
    people: People,
    kinds: dict,
    work: Path,
    seed: int,
    ambiguity_sd: float | None = None,
) -> dict:
    """One labelling run on a fresh copy of the prepared folder (with the model's rows or without); `ambiguity_sd`:
    the import's `--ambiguity-sd`."""
    with_model, start, rounds = setting
    folder = work / f"run-{seed}-{int(with_model)}-{start}-{rounds}" / "annotate"
    shutil.rmtree(folder.parent, ignore_errors=True)
    shutil.copytree(base[with_model], folder)
    spearman = lambda done: figures(done, people.truth)["spearman"]  # noqa: E731
    outcome = label_with_people(folder, people, start, rounds, folder.parent / "results", seed, spearman, ambiguity_sd)
    found = figures(folder, people.truth, kinds)
    found["human_per_item"] = outcome.human_ratings / len(people.truth)
    found["trace"] = [(rows / len(people.truth), rho) for rows, rho in outcome.trace]
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


def reached_at(trace: list[tuple[float, float]], target: float) -> float | None:
    """Human ratings an item at the first import whose Spearman reaches `target` (None: never)."""
    return next((cost for cost, rho in trace if rho >= target - 1e-9), None)


def savings(found: dict[str, list[dict]]) -> list[str]:
    """Per setting with the model, seed by seed against people with `--more` on the same crowd: the human ratings
    saved at the end, and at the first round that reaches people's final Spearman (a requester stops there)."""
    ref = found["people, 2 then --more"]
    lines = []
    for name, runs in found.items():
        if "MiniLM" not in name:
            continue
        end = [1 - r["human_per_item"] / p["human_per_item"] for r, p in zip(runs, ref)]
        at = [reached_at(r["trace"], p["spearman"]) for r, p in zip(runs, ref)]
        matched = [None if a is None else 1 - a / p["human_per_item"] for a, p in zip(at, ref)]
        reached = sum(a is not None for a in at)
        lines.append(
            f"- {name}: saves {np.mean(end):.1%} of people's human ratings at the end (Spearman "
            f"{np.mean([r['spearman'] for r in runs]):.3f} vs {np.mean([p['spearman'] for p in ref]):.3f}); reaches "
            f"people's final Spearman on {reached}/{len(runs)} seeds"
            + (f", saving {np.mean([m for m in matched if m is not None]):.1%} there" if reached else "")
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
    parser.add_argument("--ambiguity-sd", type=float, default=None, help="the import's --ambiguity-sd")
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
        scores = pq.read_table(record["files"]["scores"]).to_pylist()
        alone = spearmanr([s["score"] for s in scores], [truth[s["item_id"]] for s in scores]).statistic
        print(
            f"{len(pairs)} STS-B pairs ({len(truth)} items) from {args.stsb}; people: ambiguity sd "
            f"{args.ambiguity}, difficulty log-sd {args.difficulty}; {args.seeds} seeds; the import's --ambiguity-sd "
            f"{args.ambiguity_sd}"
        )
        print(f"MiniLM alone (cosine under the condition): Spearman {alone:.3f}; bin edges {record['bin_edges']}\n")
        found: dict[str, list[dict]] = {name: [] for name in chosen}
        for seed in range(args.seeds):
            people = People.around(truth, seed, ambiguity=args.ambiguity, difficulty=args.difficulty)
            for name, setting in chosen.items():
                found[name].append(run_setting(base, setting, people, genre, work, seed, args.ambiguity_sd))
                print(f"  seed {seed} {name}: " + ", ".join(f"{k} {v}" for k, v in found[name][-1].items()), flush=True)
        print("\n".join(table(found, sorted(set(genre.values())))))
        if "people, 2 then --more" in found:
            print("\n".join(savings(found)))


if __name__ == "__main__":
    main()
