"""The worker-reliability figure of the label-quality docs: the rater model as `annotate import --stage ratings
--aggregate model` fits it (ratings.label_batch, through testing.simulate_models.import_batch) to a simulated crowd,
each worker's fitted bias against reliability, coloured by the kind of worker the simulator made.

    python -m bench.annotate.worker_reliability --out docs/images/worker_reliability.png

The crowd: csts_pipeline.testing.simulate.simulate_crowd defaults (400 items, 3 ratings each, 20 workers: 5 spammers,
3 lenient, 3 harsh, 9 careful; seed 0). The same seed gives the same PNG.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from csts_pipeline.pipeline.shards import write_atomic
from csts_pipeline.stages.annotate.aggregation import thresholds
from csts_pipeline.testing.simulate import KINDS, simulate_crowd
from csts_pipeline.testing.simulate_models import import_batch

COLOURS = {"careful": "tab:green", "lenient": "tab:orange", "harsh": "tab:blue", "spammer": "tab:red"}


def draw(out: Path, seed: int) -> dict[str, list[float]]:
    """Label the crowd as the import does, save the scatter plot of its fitted workers, return each kind's
    reliabilities."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    crowd = simulate_crowd(seed=seed)
    found = import_batch(crowd, (), seed)
    assert found.model is not None
    fit = found.model.fit
    kinds = np.array([crowd.kind[w] for w in fit.workers])
    figure, axes = plt.subplots(figsize=(6.5, 4), dpi=100)
    for kind in KINDS:
        mine = kinds == kind
        axes.scatter(fit.bias[mine], fit.reliability[mine], s=18 + fit.answers[mine] / 2, c=COLOURS[kind], label=kind)
    axes.axhline(thresholds.UNRELIABLE_BELOW, color="grey", linestyle="--", linewidth=1)
    axes.text(
        -1.9,
        thresholds.UNRELIABLE_BELOW + 0.02,
        f"unreliable below {thresholds.UNRELIABLE_BELOW}",
        color="grey",
        fontsize=8,
    )
    axes.set_xlim(-2, 2)
    axes.set_ylim(-0.05, 1.0)
    axes.set_xlabel("fitted bias (points; < 0 harsh, > 0 lenient)")
    axes.set_ylabel("fitted reliability")
    axes.set_title("Ordinal rater model on a simulated crowd (marker size: ratings)", fontsize=10)
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    write_atomic(out, lambda handle: figure.savefig(handle, format="png", metadata={"Software": None}))
    plt.close(figure)
    return {kind: sorted(round(float(v), 3) for v in fit.reliability[kinds == kind]) for kind in KINDS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/images/worker_reliability.png"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for kind, values in draw(args.out, args.seed).items():
        print(f"{kind}: reliability {values}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
