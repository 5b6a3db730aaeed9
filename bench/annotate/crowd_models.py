"""Aggregation models on simulated crowds: the label-quality figures.

    python -m bench.annotate.crowd_models --seeds 10

Crowds from csts_pipeline.testing.simulate (400 items, 20 workers: 25% spammers, 15% lenient, 15% harsh, the rest
careful; 10% of conditions not pertinent). Every label comes from the function `annotate import --stage ratings`
calls (ratings.label_batch, through testing.simulate_models.import_batch: the crowd's answers in memory, the
batch's evidence weighed as the import weighs it). Prints three tables, as Markdown:

1. the 1-5 labels: Spearman with the truth of `--aggregate model`, `mean` and `median`, the model's 90%
   interval coverage and width, with 3 and 5 ratings per item;
2. extra ratings only where needed: the model's Spearman with a fixed number of ratings per item, and with 2
   ratings per item followed by up to 4 follow-up rounds (`annotate export --stage ratings --more`: one more
   rating on each item whose posterior sd is above 0.5, from workers not found unreliable), with the ratings
   each used per item;
3. the not-pertinent verdict: accuracy, F1 of the not-pertinent class and seconds per fit of the plain share rule
   (more than half the answers flag it) and of crowd-kit's Dawid-Skene, one-coin Dawid-Skene, GLAD and MACE.

Each figure is the mean over the seeds (standard deviation in brackets).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.stats import spearmanr

from csts_pipeline.stages.annotate.labels import verdict
from csts_pipeline.testing.simulate import Crowd, follow_up_rounds, simulate_crowd
from csts_pipeline.testing.simulate_models import batch_tasks, import_batch


def label_figures(crowd: Crowd, seed: int) -> dict[str, float]:
    """Spearman with the truth of the import's labels with `--aggregate model`, `mean` and `median`; the model's
    interval coverage and width (over the items with a rating)."""
    tasks = batch_tasks(crowd, seed)
    found = import_batch(crowd, (), seed, tasks)
    assert found.model is not None
    mean = import_batch(crowd, (), seed, tasks, how="mean").labels.label
    median = import_batch(crowd, (), seed, tasks, how="median").labels.label
    has = found.labels.ratings > 0
    low, high = found.model.low, found.model.high
    truth = crowd.truth[has]

    def rho(label: np.ndarray) -> float:
        return float(spearmanr(label[has], truth).statistic)

    covered = (low[has] <= truth) & (truth <= high[has])
    return {
        "model": rho(found.labels.label),
        "mean": rho(mean),
        "median": rho(median),
        "coverage": float(covered.mean()),
        "width": float((high - low)[has].mean()),
    }


def verdict_figures(crowd: Crowd, model: str | None) -> dict[str, float]:
    """Accuracy and F1 (not-pertinent class) of a verdict: `model` None is the share rule (> 0.5)."""
    r = crowd.ratings
    start = time.perf_counter()
    if model is None:
        p = verdict.share_of_flags(r.item, r.flagged, crowd.n_items)
    else:
        p = verdict.infer(r.item, r.worker, r.flagged, crowd.n_items, model).p_flag
    seconds = time.perf_counter() - start
    said, bad = p > 0.5, crowd.bad
    tp = float((said & bad).sum())
    f1 = 2 * tp / max(float(said.sum() + bad.sum()), 1.0)
    return {"accuracy": float((said == bad).mean()), "f1": f1, "seconds": seconds}


def show(values: list[float]) -> str:
    return f"{np.mean(values):.3f} ({np.std(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    seeds = range(args.seeds)
    print("| ratings per item | model | mean | median | 90% interval coverage | interval width |")
    print("|---:|---:|---:|---:|---:|---:|")
    for per_item in (3, 5):
        rows = [label_figures(simulate_crowd(per_item=per_item, seed=s), s) for s in seeds]
        cells = [show([r[k] for r in rows]) for k in ("model", "mean", "median", "coverage", "width")]
        print(f"| {per_item} | " + " | ".join(cells) + " |")
    print("\n| ratings | ratings per item | model's Spearman with the truth |")
    print("|---|---:|---:|")
    for per_item in (3, 4, 5, 6):
        crowds = [simulate_crowd(per_item=per_item, seed=s) for s in seeds]
        print(
            f"| fixed {per_item} | {per_item} | {show([label_figures(c, s)['model'] for s, c in zip(seeds, crowds)])} |"
        )
    grown = [follow_up_rounds(2, 4, seed=s) for s in seeds]
    used = [len(c.ratings.item) / c.n_items for c in grown]
    spearman = [label_figures(c, s)["model"] for s, c in zip(seeds, grown)]
    print(f"| 2, then --more rounds | {show(used)} | {show(spearman)} |")
    print("\n| not-pertinent verdict (3 answers per item) | accuracy | F1 (not pertinent) | seconds per fit |")
    print("|---|---:|---:|---:|")
    crowds = [simulate_crowd(per_item=3, seed=s) for s in seeds]
    for model in (None, *verdict.MODELS):
        rows = [verdict_figures(crowd, model) for crowd in crowds]
        name = "share of flags > 0.5" if model is None else model
        cells = [show([r[k] for r in rows]) for k in ("accuracy", "f1", "seconds")]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
