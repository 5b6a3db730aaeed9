"""Models in the loop on simulated crowds, through the import's own functions (the models-in-the-loop
figures).

    python -m bench.annotate.models_in_loop --seeds 10

Crowds from csts_pipeline.testing.simulate (400 items, 20 workers: 25% spammers, 15% lenient, 15% harsh, the rest
careful; 10% of conditions not pertinent) and the simulated model raters of csts_pipeline.testing.simulate_models. Every
figure goes through the command's path: the model's answers as the table `annotate rate` writes, read back as
the import reads it, labelled by ratings.label_batch (what `annotate import --stage ratings --aggregate model`
runs), follow-ups picked by followup.select from the items table the import writes. Prints, as Markdown, per way
of labelling, the mean over the seeds (standard deviation in brackets) of: the Spearman of the labels with the
truth (over the items with a human rating), the human ratings bought per item, the 90% intervals' coverage, the
mean label error on the colour conditions (the kind the strong model rates a point high and five_on_colour
says 5 on) and their coverage, the items' mean P(not pertinent), and whether the model was marked unreliable:

- people alone, fixed 1, 2, 3 and 5 ratings an item, and 2 then `--more` rounds;
- people with each model at fixed 1 and 2 ratings an item, and 1 then `--more` rounds.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
from scipy.stats import spearmanr

from csts_pipeline.testing.simulate import Crowd, simulate_crowd
from csts_pipeline.testing.simulate_models import MODEL_KINDS, condition_kind, import_batch, routed_rounds

ROUNDS = 6  # follow-up batches at most
COLUMNS = ("spearman", "human_per_item", "coverage", "colour_error", "colour_coverage", "p_not_pertinent", "unreliable")


def figures(crowd: Crowd, kinds: tuple[str, ...], seed: int) -> dict[str, float]:
    """The import's labels for the crowd (and models) against the truth."""
    found = import_batch(crowd, kinds, seed)
    assert found.model is not None
    label, low, high, truth = found.labels.label, found.model.low, found.model.high, crowd.truth
    heard = ~np.isnan(label)  # a label needs a person's rating
    covered = (low <= truth) & (truth <= high)
    colour = condition_kind(crowd.n_items, seed) & heard
    result = {
        "spearman": float(spearmanr(label[heard], truth[heard]).statistic),
        "human_per_item": float(crowd.ratings.human.sum() / crowd.n_items),
        "coverage": float(covered.mean()),
        "colour_error": float(np.mean(label[colour] - truth[colour])),
        "colour_coverage": float(covered[colour].mean()),
        "p_not_pertinent": float(np.nanmean(found.model.verdict.p_flag)),
    }
    if kinds:
        result["unreliable"] = float(np.mean([m.unreliable for m in found.model.model_fits.values()]))
    return result


def scenarios() -> dict[str, Callable[[int], dict[str, float]]]:
    """Every way of labelling the bench compares, by name: seed -> figures."""
    made: dict[str, Callable[[int], dict[str, float]]] = {}
    for per in (1, 2, 3, 5):
        made[f"people, fixed {per}"] = lambda seed, p=per: figures(simulate_crowd(per_item=p, seed=seed), (), seed)
    made["people, 2 then --more"] = lambda seed: figures(routed_rounds(2, ROUNDS, seed).crowd, (), seed)
    for kind in MODEL_KINDS:
        for per in (1, 2):
            made[f"people + {kind}, fixed {per}"] = lambda seed, k=kind, p=per: figures(
                simulate_crowd(per_item=p, seed=seed), (k,), seed
            )
        made[f"people + {kind}, 1 then --more"] = lambda seed, k=kind: figures(
            routed_rounds(1, ROUNDS, seed, kinds=(k,)).crowd, (k,), seed
        )
    return made


def cell(values: list[float]) -> str:
    return f"{np.mean(values):.3f} ({np.std(values):.3f})" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--only", help="run the scenarios whose name contains this")
    options = parser.parse_args()
    print("| labels | " + " | ".join(COLUMNS) + " |")
    print("|---|" + "---:|" * len(COLUMNS))
    for name, run in scenarios().items():
        if options.only and options.only not in name:
            continue
        found = [run(seed) for seed in range(options.seeds)]
        columns = [[f[key] for f in found if key in f] for key in COLUMNS]
        print(f"| {name} | " + " | ".join(cell(c) for c in columns) + " |", flush=True)


if __name__ == "__main__":
    main()
