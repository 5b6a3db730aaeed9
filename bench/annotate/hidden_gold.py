"""The hidden-gold figures of the label-quality docs: the per-worker sequential test on simulated
batches with controls, how many honest workers it blocks and how many random ones it catches.

    python -m bench.annotate.hidden_gold --seeds 20

Each batch: csts_pipeline.testing.simulate.gold_crowd (real items rated 3 times each by 20 workers: 5 spammers, 3
lenient, 3 harsh, 9 careful), with `--share` controls; one line per batch size.
"""

from __future__ import annotations

import argparse

import numpy as np

from csts_pipeline.testing.simulate import gold_decisions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--share", type=float, default=0.05)
    args = parser.parse_args()
    print("| real items | gold answers per worker | share | honest blocked | spammers blocked | cleared | undecided |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n_items in (500, 1000, 2000):
        found, shares, answers = gold_decisions(range(args.seeds), n_items=n_items, share=args.share)
        honest = [d for kind, ds in found.items() if kind != "spammer" for d in ds]
        spam = found["spammer"]
        print(
            f"| {n_items:,} | {np.median(answers):.0f} | {np.min(shares):.4f}-{np.max(shares):.4f} | "
            f"{honest.count('blocked')}/{len(honest)} | {spam.count('blocked')}/{len(spam)} | "
            f"{spam.count('cleared')} | {spam.count('undecided')} |"
        )


if __name__ == "__main__":
    main()
