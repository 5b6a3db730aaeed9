"""The loop that moves models: one crowd rating an item -> the batch's own model fitted out of fold -> labels rebuilt
from both -> a model trained on them (docs/annotate-models.md, "The batch's own model, fitted out of fold").

    python -m bench.annotate.crossfit_loop --pairs 1000 --folds 5 --epochs 1 [--rounds 2] [--final-epochs 1]
    python -m bench.annotate.crossfit_loop --time-fold --pairs 5000   # one fold's seconds at 10,000 items
    python -m bench.annotate.crossfit_loop --pairs 1000 --rounds 1 --final-epochs 3 --with-base --spread-as-person
    python -m bench.annotate.crossfit_loop --pairs 1000 --rounds 1 --final-epochs 3 --with-base \
        --spread-as-person --crossfit-label-spread import   # the folds learn the posterior means as they are

The batch: `--pairs` STS-B train pairs (../shared/data/stsb/sts-train.csv, real sentences and gold rescaled to 1-5),
two neutral conditions a pair (bench/annotate/real_text_models.prepared: export, conditions, export ratings), rated
once an item by one of four simulated people at Spearman ~0.5 with the gold (trust_evidence.one_person_an_item).
Then, through the commands' own step functions: `annotate import --stage ratings --aggregate model` (people
only); with `--with-base`, `annotate rate --similarity-model` (the base model's score as a second rater) and the
import again, so that the crossfit learns from those labels and the import weighing it has three raters an item (the
triad rule); `annotate crossfit` (the packaged MiniLM as the base), the import again (weighing it), with `--rounds 2`
the crossfit again on those labels (`--force`) and a third import, `annotate split` (all to train), and `train` of
one MiniLM per label source with the same settings, each scored on STS-B test (one neutral condition, gold 1-5).

Prints the labels' Spearman with the gold over the batch: the person alone, the import of the people alone, the
leaky baseline (a MiniLM trained on the person's labels scoring the same items in sample), the out-of-fold score,
the even blend of the person and the out-of-fold score (each standardised), the rebuilt labels of round 1 and 2;
then each model's Spearman on STS-B test (trained on the rebuilt labels, the person's, the gold), and the
seconds per fold."""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from scipy.stats import spearmanr

from bench.annotate.real_text_models import MODEL, prepared, read_stsb
from bench.annotate.trust_evidence import one_person_an_item, standard
from bench.shared_data import SHARED
from csts_pipeline.pipeline.manifest import TrainConfig
from csts_pipeline.stages.annotate.crowd.files import read_jsonl
from csts_pipeline.stages.annotate.layout import LABEL_SPREADS, rating_item_id
from csts_pipeline.stages.annotate.steps import crossfit as crossfit_step
from csts_pipeline.stages.annotate.steps import crossfit_folds, csts_split, similarity_rater
from csts_pipeline.stages.annotate.steps.options import CrossfitOptions, RatingsImportOptions, SplitOptions
from csts_pipeline.stages.annotate.steps.ratings import import_ratings
from csts_pipeline.stages.train import train as train_stage
from csts_pipeline.testing.command_path import CONDITIONS, task_ids, write_results

STSB = SHARED / "data" / "stsb"


def say(text: str) -> None:
    print(text, flush=True)


def labels_of(folder: Path) -> dict[str, float]:
    """The import's kept labels by item id."""
    rows = pq.read_table(folder / "ratings" / "items.parquet").to_pylist()
    return {r["item_id"]: r["label"] for r in rows if r["status"] == "kept" and r["label"] is not None}


def rho(values: dict[str, float], truth: dict[str, float]) -> float:
    ids = sorted(set(values) & set(truth))
    return float(spearmanr([values[i] for i in ids], [truth[i] for i in ids]).statistic)


def crossfit_scores(folder: Path) -> dict[str, float]:
    (found,) = (folder / "model_ratings").glob("crossfit-*")
    return {r["item_id"]: r["score"] for r in pq.read_table(found / "scores.parquet").to_pylist()}


def config(args: argparse.Namespace, epochs: int) -> TrainConfig:
    return TrainConfig(model=MODEL, epochs=epochs, batch_size=args.batch_size, max_length=args.max_length,
                       seed=0, select="last")  # fmt: skip


def train_table(items: list[dict], labels: dict[str, float]) -> pa.Table:
    """C-STS rows of `items` with `labels` (items without one left out)."""
    kept = [i for i in items if i["item_id"] in labels]
    columns = {name: [i[name] for i in kept] for name in ("sentence1", "sentence2", "condition")}
    return pa.table(columns | {"label": pa.array([float(labels[i["item_id"]]) for i in kept], pa.float64())})


def train_and_score(rows: pa.Table, test: Path, work: Path, settings: TrainConfig) -> dict:
    """`train` on `rows`, scoring `test`: its record (test metrics, seconds) and the test predictions."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    pq.write_table(rows, work / "train.parquet")
    options = train_stage.TrainOptions(train=work / "train.parquet", test=test, out=work / "out", config=settings,
                                       device="cpu")  # fmt: skip
    record = train_stage.run(options)
    scores = pq.read_table(work / "out" / "predictions_test.parquet").column("score").to_numpy()
    shutil.rmtree(work / "out" / "best")
    return {"record": record, "scores": scores}


def leaky(items: list[dict], person: dict[str, float], work: Path, settings: TrainConfig) -> dict[str, float]:
    """A MiniLM trained on the person's labels of every item, scoring the same items: the echo crossfit avoids."""
    held = pa.table({n: [i[n] for i in items] for n in ("sentence1", "sentence2", "condition")})
    held = held.append_column("label", pa.nulls(len(items), pa.float64()))
    work.mkdir(parents=True, exist_ok=True)
    pq.write_table(held, work / "same.parquet")
    found = train_and_score(train_table(items, person), work / "same.parquet", work / "leaky", settings)
    return dict(zip([i["item_id"] for i in items], found["scores"].tolist()))


def stsb_test(path: Path, out: Path) -> Path:
    """STS-B test as C-STS rows: each pair under the first neutral condition, gold 1 + 0.8 x score."""
    pairs = read_stsb(path, 10**9, 0)
    rows = [{"sentence1": p["s1"], "sentence2": p["s2"], "condition": CONDITIONS[0], "label": 1 + 0.8 * p["gold"]}
            for p in pairs]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), out)
    return out


def import_people(folder: Path, results: Path) -> None:
    import_ratings(folder, [results], RatingsImportOptions(aggregate="model"))


def time_one_fold(folder: Path, args: argparse.Namespace, options: CrossfitOptions) -> None:
    """One fold through the step's own functions (fold_jobs, run_fold): its seconds at this size."""
    items = read_jsonl(folder / "ratings_tasks" / "tasks.jsonl")
    labels = crossfit_step.labels_of(folder / "ratings")
    jobs = crossfit_step.fold_jobs(items, labels, options, options.train_config(), folder.parent / "one-fold")
    started = time.perf_counter()
    done = crossfit_folds.run_fold(jobs[0])
    say(f"one fold of {len(items)} items ({done['train_rows']} trained on, {done['held_out']} rated), "
        f"{args.epochs} epoch(s), batch {args.batch_size}: {time.perf_counter() - started:.1f} s "
        f"(train {done['train_seconds']} s)")  # fmt: skip


def rounds(folder: Path, results: Path, options, truth: dict, args: argparse.Namespace, figures: dict) -> dict:
    """Crossfit and import, `args.rounds` times; the first round's labels are returned for the models."""
    first: dict[str, float] = {}
    for n in range(1, args.rounds + 1):
        started = time.perf_counter()
        record = crossfit_step.crossfit(folder, dataclasses.replace(options, force=n > 1))
        seconds = [f["seconds"] for f in record["folds"]]
        say(f"round {n}: crossfit {time.perf_counter() - started:.0f} s, seconds per fold {seconds}")
        oof = crossfit_scores(folder)
        figures[f"out-of-fold score, round {n}"] = rho(oof, truth)
        if n == 1:
            person = figures["_person"]
            ids = sorted(set(person) & set(oof))
            blend = dict(zip(ids, standard(np.array([person[i] for i in ids], float))
                             + standard(np.array([oof[i] for i in ids]))))  # fmt: skip
            figures["even blend of person and out-of-fold score"] = rho(blend, truth)
        import_ratings(folder, [results], RatingsImportOptions(aggregate="model"))
        figures[f"rebuilt labels, round {n}"] = rho(labels_of(folder), truth)
        say(f"  labels round {n}: {figures[f'rebuilt labels, round {n}']:.3f}")
        if n == 1:
            first = labels_of(folder)
            csts_split.split(folder, SplitOptions(ratios="100:0:0"), force=True)
    return first


def spread_as_answers(folder: Path) -> dict[str, float]:
    """The rebuilt labels as `annotate split --label-spread answers` writes them (their order, given the values
    of the people's own answers); the split is then rewritten as the import gave them."""
    csts_split.split(folder, SplitOptions(ratios="100:0:0", label_spread="answers"), force=True)
    rows = pq.read_table(folder / "csts" / "train.parquet").to_pylist()
    csts_split.split(folder, SplitOptions(ratios="100:0:0"), force=True)
    return {rating_item_id(r["pair_id"], r["condition_type"]): r["label"] for r in rows}


def models(items: list[dict], labels: dict[str, dict], test: Path, work: Path, args) -> dict[str, float]:
    """One MiniLM per label source, the same settings and rows (those the split kept), scored on STS-B test."""
    split = pq.read_table(work / "annotate" / "csts" / "train.parquet").to_pylist()
    kept = {rating_item_id(r["pair_id"], r["condition_type"]) for r in split}
    rows = [i for i in items if i["item_id"] in kept]
    found = {}
    for name, source in labels.items():
        done = train_and_score(train_table(rows, source), test, work / f"model-{name}", config(args, args.final_epochs))
        found[name] = done["record"]["split_metrics"]["test"]["spearman"] / 100
        say(f"  MiniLM on {name} labels ({len(rows)} rows): STS-B test Spearman {found[name]:.3f} "
            f"({done['record']['train_seconds']:.0f} s)")  # fmt: skip
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stsb", type=Path, default=STSB)
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--final-epochs", type=int, default=1, help="the final models' epochs (0: no final models)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-leaky", action="store_true", help="skip the leaky baseline's training")
    parser.add_argument(
        "--with-base",
        action="store_true",
        help="rate the batch with the base model (annotate rate --similarity-model) before the crossfit, so the "
        "import weighs the person, the base model and the crossfit: three raters (the triad rule)",
    )
    parser.add_argument("--time-fold", action="store_true", help="time one fold at this size, then stop")
    parser.add_argument(
        "--spread-as-person",
        action="store_true",
        help="also train on the rebuilt labels as `annotate split --label-spread answers` writes them",
    )
    parser.add_argument(
        "--crossfit-label-spread",
        choices=LABEL_SPREADS,
        default=CrossfitOptions.label_spread,
        help="what the folds learn: the import's labels spread as the people's answers, or as they are",
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default, every core)")
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)  # on a machine shared with other jobs, fewer threads spin less
    with tempfile.TemporaryDirectory(prefix="crossfit-loop-") as tmp:
        loop(Path(tmp), args)


def loop(work: Path, args: argparse.Namespace) -> None:
    """The batch, the people's import, the rounds, the leaky baseline and the models; the tables at the end."""
    folder = work / "annotate"
    pairs = read_stsb(args.stsb / "sts-train.csv", args.pairs, 0)
    truth, _ = prepared(pairs, folder)
    ids = task_ids(folder / "ratings_tasks")
    rows = one_person_an_item(truth, ids, 4, 0.8, 0.45, args.seed)
    results = write_results(work / "results.csv", rows)
    import_people(folder, results)
    options = CrossfitOptions(
        model=MODEL, folds=args.folds, epochs=args.epochs, seed=args.seed, batch_size=args.batch_size,
        max_length=args.max_length, device="cpu", label_spread=args.crossfit_label_spread,
    )  # fmt: skip
    say(f"{len(pairs)} STS-B train pairs ({len(ids)} items), one person an item; {args.folds} folds, "
        f"{args.epochs} epoch(s), batch {args.batch_size}, max length {args.max_length}")  # fmt: skip
    if args.time_fold:
        time_one_fold(folder, args, options)
        return
    person = {r["item_id"]: float(r["rating"]) for r in rows}
    figures = {"_person": person, "person alone": rho(person, truth)}
    figures["import, people only"] = rho(labels_of(folder), truth)
    say(f"person alone {figures['person alone']:.3f}; people's import {figures['import, people only']:.3f}")
    if args.with_base:
        record = similarity_rater.rate_similarity(folder, MODEL, batch_size=32, device="cpu")
        base = {r["item_id"]: r["score"] for r in pq.read_table(record["files"]["scores"]).to_pylist()}
        figures["the base model score"] = rho(base, truth)
        import_people(folder, results)
        figures["import, person and base model"] = rho(labels_of(folder), truth)
        say(f"base score {figures['the base model score']:.3f}; import with it "
            f"{figures['import, person and base model']:.3f}")  # fmt: skip
    rebuilt = rounds(folder, results, options, truth, args, figures)
    items = read_jsonl(folder / "ratings_tasks" / "tasks.jsonl")
    if not args.no_leaky:
        figures["leaky baseline (in sample)"] = rho(leaky(items, person, work, config(args, args.epochs)), truth)
        say(f"  leaky baseline {figures['leaky baseline (in sample)']:.3f}")
    test = stsb_test(args.stsb / "sts-test.csv", work / "stsb-test.parquet")
    sources = {"rebuilt": rebuilt, "person": person, "gold": truth}
    say("labels' sd: " + ", ".join(f"{name} {np.std(list(v.values())):.2f}" for name, v in sources.items()))
    if args.spread_as_person:
        sources = {"rebuilt, --label-spread answers": spread_as_answers(folder)} | sources
    scored = models(items, sources, test, work, args) if args.final_epochs else {}
    say("\n| labels of the batch | Spearman with the gold |\n|---|---:|")
    for name, value in figures.items():
        if not name.startswith("_"):
            say(f"| {name} | {value:.3f} |")
    if not scored:
        return
    say("\n| MiniLM trained on | STS-B test Spearman |\n|---|---:|")
    for name, value in scored.items():
        say(f"| {name} labels | {value:.3f} |")


if __name__ == "__main__":
    main()
