"""Validation Spearman against training rows (the paper's Figure 3); baseline: the same model zero-shot.

    python bench/train/train_scaling.py --smoke                    # a generated C-STS-format set in a temp folder
    python bench/train/train_scaling.py --train data/csts_train.csv --validation data/csts_validation.csv
    python bench/train/train_scaling.py --train data/csts_train.csv --validation data/csts_validation.csv \
        --encodings cross,bi,tri --model princeton-nlp/sup-simcse-roberta-large --device cuda   # Figure 3's model

For each size (`--step` rows, twice that, ... and all rows) the first N rows of the training file are trained on,
as the authors' run_sts.py does with --max_train_samples (their CSV holds each sentence pair on two adjacent rows,
so an even N keeps pairs whole). In the same run the validation split is scored zero-shot (bi-encoder, the paper's
Table 2 setting) as the baseline. Prints, per encoding and size, validation Spearman/Pearson (x100), the delta
against zero-shot and the share of the all-rows figure, with training rows/s; saves a PNG plot (`--plot`).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from csts_pipeline.pipeline.shards import write_table
from csts_pipeline.stages.train import evaluate, train
from csts_pipeline.stages.train.data import read_csts
from csts_pipeline.stages.train.presets import train_config
from csts_pipeline.testing.train_sample import write_sample_splits

MODEL = "packaged:all-MiniLM-L6-v2"


def row_sizes(total: int, step: int) -> list[int]:
    """step, 2 * step, ... below `total`, then `total` itself (all rows)."""
    return [*range(step, total, step), total]


def zero_shot(model: str, validation: Path, scratch: Path, device: str) -> dict:
    """Validation metrics of the untrained bi-encoder: the 0-row point and the baseline."""
    options = evaluate.EvaluateOptions(
        model=model, data=validation, split="validation", device=device, metrics_out=scratch / "zero-shot.json"
    )
    return next(iter(evaluate.run(options).values()))


def train_subset(args: argparse.Namespace, encoding: str, rows: int, scratch: Path) -> dict:
    """Train on the first `rows` training rows; returns the validation metrics, rows/s and seconds."""
    subset = scratch / f"train-{rows}.parquet"
    data = read_csts(args.train, "train")
    write_table(data.take(np.arange(rows)).table, subset)
    overrides = {
        "model": args.model,
        "encoding": encoding,
        "objective": args.objective,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "learning_rate": args.lr,
        "max_length": args.max_length,
        "select": "last",
        "eval_batch_size": 128,
    }
    options = train.TrainOptions(
        train=subset,
        validation=args.validation,
        out=scratch / f"run-{encoding}-{rows}",
        config=train_config(overrides=overrides),
        device=args.device,
    )
    started = time.perf_counter()
    record = train.run(options, force=True)
    return {
        **record["split_metrics"]["validation"],
        "rows_per_s": record["examples_per_second"],
        "seconds": time.perf_counter() - started,
    }


def save_plot(path: Path, curves: dict[str, dict[int, dict]], baseline: dict, title: str) -> None:
    """Spearman against training rows, one line per encoding, the zero-shot level dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(5.5, 3.6), dpi=100)
    for encoding, points in curves.items():
        sizes = sorted(points)
        axes.plot(sizes, [points[n]["spearman"] for n in sizes], marker="o", label=encoding)
    axes.axhline(baseline["spearman"], color="grey", linestyle="--", label="zero-shot bi")
    axes.set_xlabel("training rows")
    axes.set_ylabel("validation Spearman (x100)")
    axes.set_title(title, fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)


def report(encoding: str, rows: int, point: dict, baseline: dict, full: dict | None) -> str:
    """One printed line: the figures, the delta against zero-shot and the share of the all-rows Spearman."""
    delta = point["spearman"] - baseline["spearman"]
    share = ""
    if full is not None:
        share = f"  of all-rows {point['spearman'] / full['spearman']:.2f}" if full["spearman"] > 0 else "  n/a"
    return (
        f"{encoding:<6} {rows:>7,} rows  spearman {point['spearman']:7.2f}  pearson {point['pearson']:7.2f}  "
        f"delta vs zero-shot {delta:+7.2f}{share}  train {point['rows_per_s']:6.1f} rows/s  {point['seconds']:6.0f}s"
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=Path, help="C-STS training CSV/Parquet")
    parser.add_argument("--validation", type=Path, help="C-STS validation CSV/Parquet (default: --train's split)")
    parser.add_argument("--smoke", action="store_true", help="generate a small C-STS-format set and use it")
    parser.add_argument("--step", type=int, default=None, help="rows between sizes (default 1000; smoke 150)")
    parser.add_argument("--encodings", default="bi", help="comma-separated: cross, bi, tri")
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--objective", default="mse", choices=["mse", "quad", "quad+mse"])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--plot", type=Path, default=Path("runs/train_scaling.png"), help="PNG to write")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-train-scaling-") as scratch_name:
        scratch = Path(scratch_name)
        if args.smoke:
            files = write_sample_splits(scratch / "data", {"train": 300, "validation": 100})
            args.train, args.validation = files["train"], files["validation"]
        if args.train is None:
            raise SystemExit("give --train (and --validation), or --smoke")
        args.validation = args.validation or args.train
        total = len(read_csts(args.train, "train"))
        sizes = row_sizes(total, args.step or (150 if args.smoke else 1000))
        print(f"model {args.model}; train {args.train} ({total:,} rows); validation {args.validation}")
        print(f"sizes {sizes}; {args.objective}, {args.epochs} epochs, batch {args.batch_size}, lr {args.lr}")

        baseline = zero_shot(args.model, args.validation, scratch, args.device)
        print(f"zero-shot bi (baseline): spearman {baseline['spearman']:.2f}  pearson {baseline['pearson']:.2f}")
        curves: dict[str, dict[int, dict]] = {}
        for encoding in args.encodings.split(","):
            curves[encoding] = {}
            for rows in sizes:
                curves[encoding][rows] = train_subset(args, encoding, rows, scratch)
                print(report(encoding, rows, curves[encoding][rows], baseline, None), flush=True)
        print("\nsummary (of all-rows: Spearman / the all-rows Spearman of that encoding)")
        for encoding, points in curves.items():
            for rows, point in points.items():
                print(report(encoding, rows, point, baseline, points[total]))
        title = f"{args.model} ({'generated C-STS-format set' if args.smoke else args.train.name})"
        save_plot(args.plot, curves, baseline, title)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
