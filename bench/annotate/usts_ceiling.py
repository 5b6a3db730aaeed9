"""How much a rater model can gain over the mean on USTS-C: oracle estimators fitted on all 19 raters of every
pair, the held-out truth included, beside the mean of the same answers.

    python -m bench.annotate.usts_ceiling [--seeds 3]

Draws k of each item's 19 raters as `bench.annotate.usts_crowd` does (two items a pair, 1-5 answers rounded from
1 + 0.8 x score), the truth the mean of the others, and prints Spearman with the truth of: the mean of the rounded
answers; the mean of the unrounded scores; the rounded answers less each rater's oracle bias, weighed by the
inverse of their oracle noise variance; the same on the unrounded scores; and the Bayes oracle, each item's
posterior mean when every rater's whole table P(answer | truth) is known (fitted on every item against the mean
of the other 18, the truth in BAYES_BINS bins) and the prior is the truth's own distribution. Why: a rater model
sees the rounded answers and must estimate each rater's table from them, so the Bayes oracle bounds what any
per-rater correction of these answers can reach (Dawid-Skene's free confusion included); the peer bench
(`bench.annotate.peers`) puts the rater model and crowd-kit beside it."""

from __future__ import annotations

import argparse
import json

import numpy as np
from scipy.stats import spearmanr

from bench.shared_data import SHARED

USTS_C = SHARED / "data" / "usts" / "ustsc_train.json"
BAYES_BINS = 20  # truth bins of the Bayes oracle's tables; 5 bins give the same figures to 0.001


def bayes_tables(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every rater's P(answer | truth bin), the truth's prior over the bins, and the bins' centres.

    Fitted on every item, each rater against the mean of the other 18: an oracle's knowledge, not an estimate."""
    n_raters = scores.shape[1]
    answers = np.clip(np.rint(scores), 1, 5).astype(int) - 1
    others = (scores.sum(axis=1, keepdims=True) - scores) / (n_raters - 1)
    edges = np.linspace(1, 5, BAYES_BINS + 1)
    bins = np.clip(np.digitize(others, edges) - 1, 0, BAYES_BINS - 1)
    tables = np.full((n_raters, BAYES_BINS, 5), 0.5)
    for rater in range(n_raters):
        np.add.at(tables[rater], (bins[:, rater], answers[:, rater]), 1)
    tables /= tables.sum(axis=2, keepdims=True)
    prior = np.bincount(np.clip(np.digitize(scores.mean(axis=1), edges) - 1, 0, BAYES_BINS - 1), minlength=BAYES_BINS)
    prior = (prior + 0.5) / (prior + 0.5).sum()
    return tables, prior, (edges[:-1] + edges[1:]) / 2


def oracle_figures(scores: np.ndarray, k: int, seed: int) -> dict[str, float]:
    """Spearman with the held-out truth of the mean and the oracle estimators at `k` raters an item."""
    rng = np.random.default_rng(seed)
    bias = (scores - scores.mean(axis=1, keepdims=True)).mean(axis=0)
    weight = 1 / (scores - scores.mean(axis=1, keepdims=True) - bias).var(axis=0)
    drawn = np.stack([rng.permutation(scores.shape[1])[:k] for _ in range(2 * len(scores))])
    rows = np.repeat(scores, 2, axis=0)
    picked = np.take_along_axis(rows, drawn, axis=1)
    truth = (rows.sum(axis=1) - picked.sum(axis=1)) / (scores.shape[1] - k)
    answers = np.clip(np.rint(picked), 1, 5)
    w = weight[drawn]

    def oracle(values: np.ndarray) -> np.ndarray:
        return ((values - bias[drawn]) * w).sum(axis=1) / w.sum(axis=1)

    tables, prior, centres = bayes_tables(scores)
    log_post = np.log(prior) + np.log(tables[drawn, :, answers.astype(int) - 1]).sum(axis=1)
    post = np.exp(log_post - log_post.max(axis=1, keepdims=True))
    found = {"mean of the answers": answers.mean(axis=1), "mean of the unrounded scores": picked.mean(axis=1),
             "oracle on the answers": oracle(answers), "oracle on the unrounded scores": oracle(picked),
             "Bayes oracle on the answers": post @ centres / post.sum(axis=1)}  # fmt: skip
    return {name: float(spearmanr(value, truth).statistic) for name, value in found.items()}


def main(argv: list[str] | None = None) -> dict[int, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args(argv)
    data = json.loads(USTS_C.read_text(encoding="utf-8"))
    scores = 1 + 0.8 * np.array([v["raw_annotation"] for v in data.values()], float)
    table: dict[int, dict[str, float]] = {}
    for k in (1, 2, 3, 5):
        runs = [oracle_figures(scores, k, seed) for seed in range(args.seeds)]
        table[k] = {name: float(np.mean([r[name] for r in runs])) for name in runs[0]}
    names = list(table[1])
    print("| k | " + " | ".join(names) + " |\n|---:|" + "---:|" * len(names))
    for k, row in table.items():
        print(f"| {k} | " + " | ".join(f"{row[n]:.3f}" for n in names) + " |")
    return table


if __name__ == "__main__":
    main()
