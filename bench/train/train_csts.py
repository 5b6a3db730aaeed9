"""Fine-tune the packaged all-MiniLM-L6-v2 bi-encoder on C-STS-format data; baseline: the same model zero-shot.

    python bench/train/train_csts.py --smoke                       # a generated C-STS-format set in a temp folder
    python bench/train/train_csts.py --train data/csts_train.csv --validation data/csts_validation.csv

The official C-STS files come from the authors (princeton-nlp/c-sts: request the password, then
`bash extract.sh csts.tar.enc PASSWORD` gives csts_{train,validation,test}.csv). In one run the script scores
the validation split zero-shot (the baseline, the paper's Table 2 setting), fine-tunes with `stages.train.train`, and
prints validation Spearman/Pearson (x100) of both, the delta and ratio, training examples/s and scoring
examples/s.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from csts_pipeline.pipeline.device import resolve_device
from csts_pipeline.pipeline.packaged_models import resolve_model_path
from csts_pipeline.stages.train import train
from csts_pipeline.stages.train.data import read_csts
from csts_pipeline.stages.train.models import EncoderSpec, load_model, model_pooling
from csts_pipeline.stages.train.presets import train_config
from csts_pipeline.stages.train.scoring import half_precision, score_split
from csts_pipeline.testing.train_sample import write_sample_splits

MODEL = "packaged:all-MiniLM-L6-v2"


def zero_shot(validation: Path, device: torch.device, precision: str, batch_size: int) -> tuple[dict, float]:
    """Validation metrics of the untrained bi-encoder, and its scoring speed (rows/s)."""
    spec = EncoderSpec(encoding="bi", pooler=model_pooling(resolve_model_path(MODEL)) or "cls", base_model=MODEL)
    model = load_model(MODEL, spec).to(device)
    data = read_csts(validation, "validation")
    dtype = half_precision(device, precision)
    score_split(model, data.take(np.arange(min(len(data), batch_size))), device, batch_size, dtype)  # warm-up
    started = time.perf_counter()
    _, metrics = score_split(model, data, device, batch_size, dtype)
    return metrics, len(data) / (time.perf_counter() - started)


def line(name: str, metrics: dict, note: str) -> str:
    values = f"spearman {metrics['spearman']:7.2f}  pearson {metrics['pearson']:7.2f}  n={metrics['n']}"
    return f"{name:<22} {values}  {note}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=Path, help="C-STS training CSV/Parquet")
    parser.add_argument("--validation", type=Path, help="C-STS validation CSV/Parquet")
    parser.add_argument("--smoke", action="store_true", help="generate a small C-STS-format set and use it")
    parser.add_argument("--objective", default="mse", choices=["mse", "quad", "quad+mse"])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--out", type=Path, default=None, help="keep the trained model here (default: a temp dir)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-train-csts-") as scratch:
        if args.smoke:
            files = write_sample_splits(Path(scratch) / "data", {"train": 300, "validation": 100})
            args.train, args.validation = files["train"], files["validation"]
        if args.train is None or args.validation is None:
            parser.error("give --train and --validation (or --smoke)")
        device = resolve_device(args.device)
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu x{torch.get_num_threads()}"
        print(f"device: {name}; model {MODEL} (bi-encoder); train {args.train}; validation {args.validation}")

        baseline, scoring_rate = zero_shot(args.validation, device, args.precision, 256)
        print(line("zero-shot (baseline)", baseline, f"scoring {scoring_rate:,.0f} rows/s"))

        config = train_config(
            overrides={
                "model": MODEL,
                "encoding": "bi",
                "objective": args.objective,
                "epochs": args.epochs,
                "batch_size": args.batch_size,
                "learning_rate": args.lr,
                "max_steps": args.max_steps,
                "precision": args.precision,
                "eval_batch_size": 256,
            }
        )
        options = train.TrainOptions(
            train=args.train,
            validation=args.validation,
            out=args.out or Path(scratch) / "run",
            config=config,
            device=args.device,
        )
        record = train.run(options, force=True)
        tuned = record["split_metrics"]["validation"]
        note = (
            f"training {record['examples_per_second']:,.1f} rows/s, {record['counts']['epochs']} epoch(s), "
            f"best epoch {record['best_epoch']}, {record['timings']['seconds']:.0f}s in all"
        )
        print(line(f"fine-tuned ({args.objective})", tuned, note))
        delta = tuned["spearman"] - baseline["spearman"]
        ratio = "n/a (baseline <= 0)"
        if baseline["spearman"] > 0:
            ratio = f"{tuned['spearman'] / baseline['spearman']:.2f}x"
        print(f"spearman delta {delta:+.2f} points; ratio fine-tuned / zero-shot {ratio}")


if __name__ == "__main__":
    main()
