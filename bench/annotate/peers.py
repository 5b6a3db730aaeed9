"""The rater model beside its peers (crowd-kit and the mean) on the same answers, in one run.

    python -m bench.annotate.peers                      # USTS-C train, k 1 2 3 5, 3 seeds, both arms; STS-B train
    python -m bench.annotate.peers --quick              # one seed, k 1 2, USTS-C only: a couple of minutes
    python -m bench.annotate.peers --k 2 --seeds 1 --pairs 300 --no-stsb

USTS-C train (a real crowd: 19 raters a pair) as bench/annotate/usts_crowd.py takes it: the same reading
(`read_usts`), the same annotate folder (two items a pair through the conditions round trip and the ratings export,
its `prepare_folder`), the same draw of `k` raters an item with the rest of them as the truth (`draw`), the same
expert sample (a seeded `--expert-share` of the items, seed + 1000) and the same import (`run`: `annotate import
--stage ratings --aggregate model` through the command's own function, without and with `--expert`). STS-B train
(gold rescaled to 1-5) as bench/annotate/trust_evidence.py takes it: one simulated person an item
(`one_person_an_item`, its default crowd) and the packaged MiniLM through `annotate rate --similarity-model` as a
second worker, whose answer is its bin.

The peers get the very same answers (the rows of the results file; on STS-B also the model's bins as a worker
`model:MiniLM`): crowd-kit's MajorityVote, DawidSkene, OneCoinDawidSkene, GLAD, MACE, Wawa and ZeroBasedSkill, each
read as its class (`labels_`) and its posterior mean (sum of c x P(c) over `probas_`), and the plain mean of the
answers. With the expert sample only the project and DawidSkene (the one of them whose `fit` takes `true_labels`:
the sample's truth, rounded) see it; the other peers' rows in that arm are their rows without it. Every figure is
on the items outside the expert sample, in both arms.

Per dataset, k and arm, means over seeds (range over seeds in brackets): Spearman with the truth, mean absolute
error on the 1-5 scale, the scale offset mean(label) - mean(truth), the 90% interval's coverage of the rounded truth
and its size in labels (the project: items.parquet's interval_low..high; the project's posterior and the crowd-kit
peers: the smallest set of labels holding 90% of each item's posterior), and seconds per method (the project: the
whole import, reading and writing included; a peer: its fit and predict)."""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import sklearn
from crowdkit.aggregation import (
    GLAD,
    MACE,
    DawidSkene,
    MajorityVote,
    OneCoinDawidSkene,
    Wawa,
    ZeroBasedSkill,
)
from scipy.stats import spearmanr
from sklearn.base import BaseEstimator

from bench.annotate import trust_evidence, usts_crowd
from bench.annotate.real_text_models import MODEL, read_stsb
from bench.shared_data import SHARED
from csts_pipeline.stages.annotate.steps import similarity_rater

LABELS = np.arange(1, 6)
LEVEL = 0.9  # the intervals' level
STSB = SHARED / "data" / "stsb" / "sts-train.csv"
USTS_NAME = "USTS-C train"
STSB_NAME = "STS-B train, 1 person + MiniLM"
PROJECT = "the project: labels, interval"
POSTERIOR = "the project: posterior mean, 90% set"
MEAN = "mean of the answers"
FIGURES = ("spearman", "mae", "offset", "coverage", "size", "seconds")
Key = tuple[str, int, str]  # dataset, k, arm
Found = dict[Key, dict[str, list[dict[str, float]]]]  # -> method -> figures per seed


def tagged(cls: type) -> type:
    """crowd-kit 1.4.2's own estimator with scikit-learn's estimator tags: its predict calls check_is_fitted,
    which since scikit-learn 1.6 reads `__sklearn_tags__` and fails on a class that has none. Nothing else changes."""
    return type(cls.__name__, (cls,), {"__sklearn_tags__": BaseEstimator.__sklearn_tags__})


PEERS: dict[str, Callable[[], Any]] = {
    "MajorityVote": MajorityVote,
    "DawidSkene": DawidSkene,
    "OneCoinDawidSkene": OneCoinDawidSkene,
    "GLAD": GLAD,
    "MACE": MACE,
    "Wawa": tagged(Wawa),
    "ZeroBasedSkill": tagged(ZeroBasedSkill),
}
TAKES_TRUE_LABELS = ("DawidSkene",)


def smallest_sets(posterior: np.ndarray, level: float = LEVEL) -> np.ndarray:
    """Per row of `posterior` (items x 5, over 1..5), the smallest set of labels holding `level` of it, as a
    boolean mask."""
    order = np.argsort(-posterior, axis=1, kind="stable")
    held = np.cumsum(np.take_along_axis(posterior, order, axis=1), axis=1)
    needed = (held < level - 1e-9).sum(axis=1) + 1  # labels up to and including the one that reaches the level
    ranks = np.argsort(order, axis=1)
    return ranks < needed[:, None]


def score(label: np.ndarray, truth: np.ndarray, sets: np.ndarray | None, seconds: float) -> dict[str, float]:
    """One method's figures: Spearman, mean absolute error, offset, coverage of the rounded truth by `sets`
    (items x 5 masks, None: no intervals) and their mean size in labels."""
    rounded = np.clip(np.rint(truth), 1, 5).astype(int)
    found = {
        "spearman": float(spearmanr(label, truth).statistic),
        "mae": float(np.mean(np.abs(label - truth))),
        "offset": float(np.mean(label) - np.mean(truth)),
        "coverage": float("nan"),
        "size": float("nan"),
        "seconds": seconds,
    }
    if sets is not None:
        found["coverage"] = float(np.mean(sets[np.arange(len(rounded)), rounded - 1]))
        found["size"] = float(np.mean(sets.sum(axis=1)))
    return found


def project_figures(folder: Path, truth: dict[str, float], held: set[str], seconds: float) -> dict[str, dict]:
    """The import's labels with their intervals, and its posterior read as the peers' are, from items.parquet."""
    items = [r for r in pq.read_table(folder / "ratings" / "items.parquet").to_pylist()
             if r["label"] is not None and r["item_id"] in truth and r["item_id"] not in held]  # fmt: skip
    true = np.array([truth[r["item_id"]] for r in items])
    label = np.array([r["label"] for r in items], float)
    low = np.array([r["interval_low"] for r in items])[:, None]
    high = np.array([r["interval_high"] for r in items])[:, None]
    posterior = np.array([r["distribution"] for r in items], float)
    return {
        PROJECT: score(label, true, (low <= LABELS) & (high >= LABELS), seconds),
        POSTERIOR: score(posterior @ LABELS, true, smallest_sets(posterior), seconds),
    }


def fit_peer(name: str, data: pd.DataFrame, known: pd.Series | None) -> tuple[pd.Series, pd.DataFrame, float]:
    """One crowd-kit aggregator on `data` (task, worker, label): its classes, its posterior over 1..5 (items x 5)
    and the seconds its fit and predict took. `known`: true labels for the one that takes them."""
    model = PEERS[name]()
    start = time.perf_counter()
    if known is not None:
        model.fit(data, true_labels=known)
    else:
        model.fit(data)
    if getattr(model, "labels_", None) is None:  # Wawa, ZeroBasedSkill: fit measures the skills, predict labels
        model.predict_proba(data)
    seconds = time.perf_counter() - start
    probas = model.probas_.reindex(columns=LABELS, fill_value=0.0).fillna(0.0)
    return model.labels_, probas, seconds


def peer_figures(rows: list[dict], truth: dict[str, float], held: set[str], known: bool) -> dict[str, dict]:
    """Every peer on the results rows, scored on the items outside `held`; `known`: the arm with the sample
    (only the aggregators that take true labels run, given the sample's rounded truth)."""
    data = pd.DataFrame({"task": [r["item_id"] for r in rows], "worker": [r["worker_id"] for r in rows],
                         "label": [int(r["rating"]) for r in rows]})  # fmt: skip
    ids = sorted(set(data["task"]) - held)
    true = np.array([truth[i] for i in ids])
    found: dict[str, dict] = {}
    if not known:
        start = time.perf_counter()
        mean = data.groupby("task")["label"].mean()
        found[MEAN] = score(mean.loc[ids].to_numpy(float), true, None, time.perf_counter() - start)
    seen = set(data["label"])
    sample = pd.Series({i: int(np.clip(np.rint(truth[i]), 1, 5)) for i in sorted(held)}, dtype=int)
    for name in PEERS:
        if known and name not in TAKES_TRUE_LABELS:
            continue
        labels, probas, seconds = fit_peer(name, data, sample[sample.isin(seen)] if known else None)
        posterior = probas.loc[ids].to_numpy(float)
        sets = smallest_sets(posterior)
        found[f"{name}: class"] = score(labels.loc[ids].to_numpy(float), true, sets, seconds)
        found[f"{name}: posterior mean"] = score(posterior @ LABELS, true, sets, seconds)
    return found


def both_arms(folder: Path, rows: list[dict], answers: list[dict], truth: dict, mean: dict, held: set[str]) -> dict:
    """The project on the results `rows` (and any model answers in `folder`) without and with the expert sample,
    the peers on `answers` (the same rows, and the model's): {arm: {method: figures}}."""
    work = folder.parent
    expert = work / "expert.csv"
    expert.write_text("item_id,label\n" + "".join(f"{i},{truth[i]:.2f}\n" for i in sorted(held)))
    found: dict[str, dict] = {}
    for arm, given in zip(usts_crowd.ARMS, (None, expert)):
        start = time.perf_counter()
        usts_crowd.run(folder, rows, truth, mean, given, held)
        seconds = time.perf_counter() - start
        found[arm] = project_figures(folder, truth, held, seconds)
    plain = peer_figures(answers, truth, held, known=False)
    found[usts_crowd.ARMS[0]] |= plain
    found[usts_crowd.ARMS[1]] |= plain | peer_figures(answers, truth, held, known=True)
    return found


def expert_sample(ids: list[str], share: float, seed: int) -> set[str]:
    """usts_crowd's sample: a seeded `share` of the items."""
    rng = np.random.default_rng(seed + 1000)
    return set(rng.choice(sorted(ids), max(1, round(share * len(ids))), replace=False).tolist())


def add(found: Found, dataset: str, k: int, arms: dict[str, dict], say: Callable[[str], None]) -> None:
    for arm, methods in arms.items():
        for method, figures in methods.items():
            found.setdefault((dataset, k, arm), {}).setdefault(method, []).append(figures)
        say(f"  {dataset}, k={k}, {arm}: the project {methods[PROJECT]['spearman']:.3f}, "
            f"DawidSkene posterior mean {methods['DawidSkene: posterior mean']['spearman']:.3f}")  # fmt: skip


def usts(args: argparse.Namespace, work: Path, found: Found, say: Callable[[str], None]) -> None:
    """USTS-C: every seed and k, both arms, on one prepared folder (usts_crowd.crowd's loop)."""
    pairs = usts_crowd.read_usts(args.usts / args.file, args.pairs)
    folder = work / "usts" / "annotate"
    items = usts_crowd.prepare_folder([(p["s1"], p["s2"]) for p in pairs], folder)
    ids = usts_crowd.task_ids(folder / "ratings_tasks")
    assert set(ids) == set(items), "the export holds items that are not the pairs' (controls?)"
    say(f"{USTS_NAME}: {len(pairs)} pairs ({len(ids)} items); k = {args.k}; {args.seeds} seeds")
    for seed in range(args.seeds):
        held = expert_sample(ids, args.expert_share, seed)
        for k in args.k:
            rows, truth, mean = usts_crowd.draw(pairs, items, k, seed * 100 + k)
            add(found, USTS_NAME, k, both_arms(folder, rows, rows, truth, mean, held), say)


def stsb_rows(truth: dict, ids: list[str], bins: dict[str, int], seed: int) -> tuple[list[dict], dict]:
    """One simulated person an item (trust_evidence's crowd, its defaults) and the model's bin as a second
    worker (the peers' answers; the project reads the model from its own folder); the mean of the two."""
    person = trust_evidence.one_person_an_item(truth, ids, 4, 0.8, 0.45, seed)
    model = [{"item_id": i, "worker_id": "model:MiniLM", "rating": bins[i], "not_pertinent": "false"} for i in ids]
    mean = {r["item_id"]: (r["rating"] + bins[r["item_id"]]) / 2 for r in person}
    return person, model, mean


def references(person: list[dict], truth: dict, scores: dict, held: set[str]) -> dict[str, dict]:
    """STS-B's references, Spearman only where not on the scale: the person's answer, the model's score and
    their even blend (each standardised), as trust_evidence reports them."""
    ids = sorted(set(scores) - held)
    true = np.array([truth[i] for i in ids])
    answer = {r["item_id"]: float(r["rating"]) for r in person}
    mine = np.array([answer[i] for i in ids])
    found = {"the person's answer": score(mine, true, None, 0.0)}
    score_of = np.array([scores[i] for i in ids])
    blend = trust_evidence.standard(mine) + trust_evidence.standard(score_of)
    for name, values in (("MiniLM's score (rank only)", score_of), ("even blend, standardised (rank only)", blend)):
        found[name] = {f: float("nan") for f in FIGURES} | {"spearman": float(spearmanr(values, true).statistic)}
    return found


def stsb(args: argparse.Namespace, work: Path, found: Found, say: Callable[[str], None]) -> None:
    """STS-B train with MiniLM rating every item once (the import reads it from its folder), every seed, both arms."""
    pairs = read_stsb(args.stsb, args.stsb_pairs or 10**9, 0)
    folder = work / "stsb" / "annotate"
    items = usts_crowd.prepare_folder([(p["s1"], p["s2"]) for p in pairs], folder)
    truth = {item: 1 + 0.8 * pairs[pair]["gold"] for item, (pair, _) in items.items()}
    start = time.perf_counter()
    record = similarity_rater.rate_similarity(folder, MODEL, batch_size=32, device="cpu")
    rated = pq.read_table(record["files"]["scores"]).to_pylist()
    took = time.perf_counter() - start
    say(f"{STSB_NAME}: {len(pairs)} pairs ({len(items)} items), MiniLM rated them in {took:.0f} s")
    scores = {r["item_id"]: r["score"] for r in rated}
    bins = {r["item_id"]: int(r["bin"]) for r in rated}
    ids = usts_crowd.task_ids(folder / "ratings_tasks")
    for seed in range(args.seeds):
        person, model, mean = stsb_rows(truth, ids, bins, seed)
        held = expert_sample(ids, args.expert_share, seed)
        arms = both_arms(folder, person, person + model, truth, mean, held)
        for arm in arms.values():
            arm |= references(person, truth, scores, held)
        add(found, STSB_NAME, 1, arms, say)


def cell(values: list[float], signed: bool = False) -> str:
    """Mean over seeds, with the range where there are several; "-" where the method has no such figure."""
    values = [v for v in values if np.isfinite(v)]
    if not values:
        return "-"
    form = "{:+.3f}" if signed else "{:.3f}"
    if len(values) == 1:
        return form.format(values[0])
    return f"{form.format(np.mean(values))} ({form.format(min(values))} to {form.format(max(values))})"


def table(found: Found, key: Key) -> list[str]:
    """The Markdown table of one dataset, k and arm: a row per method, means over seeds."""
    lines = [
        f"### {key[0]}, k = {key[1]}, {key[2]}",
        "",
        "| method | Spearman | mean abs. error | label - truth | 90% coverage | labels in the 90% set | s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for method, runs in found[key].items():
        seconds = [r["seconds"] for r in runs if np.isfinite(r["seconds"])]
        lines.append(
            f"| {method} | {cell([r['spearman'] for r in runs])} | {cell([r['mae'] for r in runs])} | "
            f"{cell([r['offset'] for r in runs], signed=True)} | {cell([r['coverage'] for r in runs])} | "
            f"{cell([r['size'] for r in runs])} | {f'{np.mean(seconds):.2f}' if seconds else '-'} |"
        )
    return lines


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--usts", type=Path, default=usts_crowd.USTS, help="the folder of the USTS JSON files")
    parser.add_argument("--file", default=usts_crowd.USTS_C, help="the USTS file (default the USTS-C train file)")
    parser.add_argument("--pairs", type=int, default=None, help="a seeded sample of this many USTS pairs (default all)")
    parser.add_argument("--k", type=int, nargs="+", default=list(usts_crowd.KS), help="raters an item (1 2 3 5)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--expert-share", type=float, default=0.05)
    parser.add_argument("--stsb", type=Path, default=STSB, help="the STS-B file (default its train file)")
    parser.add_argument("--stsb-pairs", type=int, default=None, help="a seeded sample of STS-B pairs (default all)")
    parser.add_argument("--no-stsb", action="store_true", help="USTS-C only")
    parser.add_argument("--quick", action="store_true", help="one seed, k 1 and 2, USTS-C only")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.k, args.no_stsb = 1, [1, 2], True
    return args


def main(argv: list[str] | None = None, say: Callable[[str], None] = print) -> Found:
    """The bench from the command line (`argv`); prints the tables and returns the figures,
    {(dataset, k, arm): {method: [figures per seed]}}, figures as FIGURES names them."""
    args = parse(argv)
    say(f"crowd-kit's Wawa and ZeroBasedSkill run with scikit-learn {sklearn.__version__} through `tagged` "
        "(their own code, given the estimator tags check_is_fitted reads since 1.6)")  # fmt: skip
    found: Found = {}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        usts(args, Path(tmp), found, say)
        if not args.no_stsb:
            stsb(args, Path(tmp), found, say)
    peers = ", ".join(TAKES_TRUE_LABELS)
    say(f"\n{time.perf_counter() - start:.0f} s in all. Figures on the items outside the expert sample; with the "
        f"sample only the project and {peers} see it (the other rows are as without). label - truth: the mean "
        "label minus the mean truth (the scale offset); s: seconds a run")  # fmt: skip
    for key in found:
        say("\n" + "\n".join(table(found, key)))
    return found


if __name__ == "__main__":
    main()
