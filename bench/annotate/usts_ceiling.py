"""How much a rater model can gain over the mean on USTS-C: oracle estimators that know every rater's bias and
noise (measured on all 19 raters of all pairs, the held-out truth included), beside the mean of the same answers.

    python -m bench.annotate.usts_ceiling [--seeds 3]

Draws k of each item's 19 raters as `bench.annotate.usts_crowd` does (two items a pair, 1-5 answers rounded from
1 + 0.8 x score), the truth the mean of the others, and prints Spearman with the truth of: the mean of the rounded
answers; the mean of the unrounded scores; the rounded answers less each rater's oracle bias, weighed by the
inverse of their oracle noise variance; the same on the unrounded scores. Why: a rater model sees the rounded
answers and must estimate bias and noise from them, so the oracle on the rounded answers bounds what per-rater
correction can add; the peer bench (`bench.annotate.peers`) puts the rater model and crowd-kit beside it."""

from __future__ import annotations

import argparse
import json

import numpy as np
from scipy.stats import spearmanr

from bench.shared_data import SHARED

USTS_C = SHARED / "data" / "usts" / "ustsc_train.json"


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

    found = {"mean of the answers": answers.mean(axis=1), "mean of the unrounded scores": picked.mean(axis=1),
             "oracle on the answers": oracle(answers), "oracle on the unrounded scores": oracle(picked)}  # fmt: skip
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
