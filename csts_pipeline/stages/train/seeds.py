"""`train --seeds 42,43,44`: the same setting trained once per seed, each run in `<out>/seed-<n>/` (a complete,
resumable train output of its own), and the figures summed up as the paper's Table 3 gives them: each seed, then
the mean +- standard deviation (numpy's, ddof 0) of Spearman and Pearson per split, in `<out>/metrics.json`."""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import SEED_MAX
from csts_pipeline.pipeline.records import read_record
from csts_pipeline.stages.train import train as stage
from csts_pipeline.stages.train.scoring import write_metrics

log = logging.getLogger(__name__)
KEYS = ("spearman", "pearson")


def parse_seeds(text: str) -> list[int]:
    """'42,43,44' or '42 43 44' -> [42, 43, 44]; each seed once."""
    parts = text.replace(",", " ").split()
    try:
        seeds = [int(part) for part in parts]
    except ValueError:
        raise UserError(f"--seeds {text!r}: give whole numbers, e.g. --seeds 42,43,44") from None
    if any(not 0 <= seed <= SEED_MAX for seed in seeds):
        raise UserError(f"--seeds {text!r}: each seed must be 0 to {SEED_MAX}")
    if not seeds or len(set(seeds)) != len(seeds):
        raise UserError(f"--seeds {text!r}: give one or more different seeds, e.g. --seeds 42,43,44")
    return seeds


def summarise(per_seed: dict[int, dict[str, dict]]) -> dict[str, dict]:
    """{split: {"seeds": {seed: metrics}, "mean": {spearman, pearson}, "std": {...}, "n": rows}}; a figure that
    is null for any seed (an unlabelled split) has a null mean and std."""
    splits = next(iter(per_seed.values()))
    summary = {}
    for split in splits:
        runs = {str(seed): metrics[split] for seed, metrics in per_seed.items()}
        mean, std = {}, {}
        for key in KEYS:
            values = [run[key] for run in runs.values()]
            ok = all(value is not None for value in values)
            mean[key] = round(float(np.mean(values)), 4) if ok else None
            std[key] = round(float(np.std(values)), 4) if ok else None
        summary[split] = {"seeds": runs, "mean": mean, "std": std, "n": splits[split]["n"]}
    return summary


def format_seed_table(summary: dict[str, dict]) -> str:
    """Table 3's form: per split, each seed's Spearman / Pearson, then mean+-std of each."""

    def cell(values: dict) -> str:
        return " / ".join("-" if values[k] is None else f"{values[k]:.2f}" for k in KEYS)

    def spread(entry: dict) -> str:
        mean, std = entry["mean"], entry["std"]
        return " / ".join("-" if mean[k] is None else f"{mean[k]:.1f}+-{std[k]:.1f}" for k in KEYS)

    seeds = list(next(iter(summary.values()))["seeds"])
    header = f"{'split':<12} " + " ".join(f"{'seed ' + s:>15}" for s in seeds) + f" {'mean+-std (S / P)':>22}"
    lines = [header]
    for split, entry in summary.items():
        cells = " ".join(f"{cell(entry['seeds'][s]):>15}" for s in seeds)
        lines.append(f"{split:<12} {cells} {spread(entry):>22}")
    return "\n".join(lines)


def run_seeds(options: stage.TrainOptions, seeds: list[int], force: bool = False) -> dict:
    """Train once per seed; returns {"runs": {seed: record}, "metrics": summary} and writes the summary."""
    if options.out.is_file():
        raise UserError(f"--out {options.out}: exists and is not a folder")
    record = read_record(options.out) if options.out.is_dir() else None
    if record is not None:
        raise UserError(f"--out {options.out}: holds a single train run; choose another folder for --seeds")
    runs, per_seed = {}, {}
    for seed in seeds:
        config = options.config.model_copy(update={"seed": seed})
        one = replace(options, out=options.out / f"seed-{seed}", config=config, metrics_out=None)
        log.info("train: seed %d of %s", seed, ", ".join(map(str, seeds)))
        result = stage.run(one, force=force)
        runs[seed] = read_record(one.out) if result.get("status") == "up-to-date" else result
        per_seed[seed] = runs[seed]["split_metrics"]
    summary = summarise(per_seed)
    write_metrics(options.out / "metrics.json", summary)
    if options.metrics_out is not None:
        write_metrics(options.metrics_out, summary)
    return {"runs": runs, "metrics": summary}
