"""Models in the loop on simulated crowds (docs/annotate.md, "Models in the loop").

    python -m bench.models_in_loop --seeds 10

Crowds from tests.support.simulate (400 items, 20 workers: 25% spammers, 15% lenient, 15% harsh, the rest
careful; 10% of conditions not pertinent) and the simulated model raters of tests.support.simulate_models
(strong, weak, confident_wrong). Prints, as Markdown, per way of labelling: the Spearman of the labels with the
truth, the human ratings bought per item, and the 90% intervals' coverage, each the mean over the seeds
(standard deviation in brackets):

- people alone, fixed 3 and 5 ratings an item (the ordinal rater model);
- people alone, 2 ratings an item then `--more` rounds (follow-up batches of one rating on each item the
  posterior still leaves wide);
- people with each model: the model answers every item, people give 1 rating an item, then `--more` rounds
  routed by the posterior that holds the model's answers;
- people with each model at a fixed 3 ratings an item (the same human ratings as people alone at 3);
- the model alone: its expected rating, sum_y y q(y).

Spearman is taken over the items with a human rating (an item no person rated is `unanswered`), as in
bench/crowd_models.py.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
from scipy.stats import spearmanr

from csts_pipeline.stages.annotate.labels import quality
from csts_pipeline.stages.annotate.labels.ordinal import SCALE
from tests.support.simulate import Crowd, simulate_crowd
from tests.support.simulate_models import MODEL_KINDS, model_answers, routed_rounds, with_models

ROUNDS = 6  # follow-up batches at most


def figures(crowd: Crowd) -> dict[str, float]:
    """Spearman with the truth of the rater model's labels, human ratings per item, 90% interval coverage."""
    fit = quality.anchored_fit(crowd.ratings, crowd.n_items, None)
    low, high = fit.interval()
    r = crowd.ratings
    rated = np.bincount(r.item[r.rated & r.human], minlength=crowd.n_items) > 0  # a label needs a person's rating
    return {
        "spearman": float(spearmanr(fit.label[rated], crowd.truth[rated]).statistic),
        "human_per_item": float(crowd.ratings.human.sum() / crowd.n_items),
        "coverage": float(np.mean((low <= crowd.truth) & (crowd.truth <= high))),
    }


def model_alone(seed: int, kind: str) -> dict[str, float]:
    """The model's expected rating against the truth; no human rating, no interval."""
    crowd = simulate_crowd(per_item=1, seed=seed)
    q, _ = model_answers(crowd, kind, seed)
    return {"spearman": float(spearmanr(q @ SCALE, crowd.truth).statistic), "human_per_item": 0.0}


def scenarios() -> dict[str, Callable[[int], dict[str, float]]]:
    """Every way of labelling the bench compares, by name: seed -> figures."""
    made: dict[str, Callable[[int], dict[str, float]]] = {
        "people, fixed 3": lambda seed: figures(simulate_crowd(per_item=3, seed=seed)),
        "people, fixed 5": lambda seed: figures(simulate_crowd(per_item=5, seed=seed)),
        "people, 2 then --more": lambda seed: figures(routed_rounds(2, ROUNDS, seed).crowd),
    }
    for kind in MODEL_KINDS:
        made[f"people + {kind} model, 1 then --more"] = lambda seed, k=kind: figures(
            routed_rounds(1, ROUNDS, seed, kinds=(k,)).crowd
        )
        made[f"people + {kind} model, fixed 3"] = lambda seed, k=kind: figures(
            with_models(simulate_crowd(per_item=3, seed=seed), (k,), seed)
        )
        made[f"{kind} model alone"] = lambda seed, k=kind: model_alone(seed, k)
    return made


def cell(values: list[float]) -> str:
    return f"{np.mean(values):.3f} ({np.std(values):.3f})" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=10)
    seeds = range(parser.parse_args().seeds)
    print("| labels | Spearman with the truth | human ratings per item | 90% interval coverage |")
    print("|---|---:|---:|---:|")
    for name, run in scenarios().items():
        found = [run(seed) for seed in seeds]
        columns = [[f[key] for f in found if key in f] for key in ("spearman", "human_per_item", "coverage")]
        print(f"| {name} | " + " | ".join(cell(c) for c in columns) + " |")


if __name__ == "__main__":
    main()
