"""How fast `annotate import --stage ratings --aggregate model` labels a large batch (200,000 items in
120 s or less on 2 cores, within 3 GiB), through the command's own function on answers made in memory.

    python -m bench.annotate.import_speed --items 20000 200000

Each size is one batch of a simulated crowd of people (testing.simulate's kinds of worker, noise and
flags; 3 distinct raters an item, one worker for every 20 items, so each gives about 60 ratings), its tasks as
the ratings export writes them and its answers as the import accepts them (testing.simulate_models),
labelled by steps/ratings.label_batch: what the import runs between reading the results and writing its files
(the rater model, the not-pertinent verdict, agreement, the workers table and the high-against-low check). Each
size and label policy runs in its own process, so its peak RSS is its own (the batch in memory included). Prints,
per size: the seconds (wall and CPU), items/s and peak RSS of `--aggregate model`, and the same for `--aggregate
mean` on the same batch in the same run (the yardstick: the import's work without the rater model), with the ratio
of the two wall times. On a shared machine the CPU seconds are the steadier figure."""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np

from csts_pipeline.stages.annotate.labels.agreement import RatingArrays
from csts_pipeline.stages.annotate.steps.ratings import label_batch
from csts_pipeline.testing.simulate import Crowd, answer, crowd_workers, flags, truth_labels
from csts_pipeline.testing.simulate_models import batch_tasks, people_answers

ITEMS_PER_WORKER = 20  # workers = items / this (simulate_crowd's default: 400 items, 20 workers)
PER_ITEM = 3
HEADER = (
    "| items | ratings | workers | model s | model CPU s | model items/s | model peak MiB | mean s | mean peak MiB"
    " | model / mean |"
)


def large_crowd(n_items: int, per_item: int = PER_ITEM, seed: int = 0) -> Crowd:
    """simulate_crowd's crowd (shares of kinds, noise 0.6, 10% of conditions not pertinent) at any size: raters
    drawn without a n_items x n_workers array (redrawn where an item got a worker twice)."""
    rng = np.random.default_rng(seed)
    n_workers = max(per_item, n_items // ITEMS_PER_WORKER)
    kind = crowd_workers(n_workers, 0.25, 0.15, 0.15)
    names = np.array(list(kind))
    truth = truth_labels(n_items // 2, rng)
    bad = rng.random(len(truth)) < 0.1
    chosen = rng.integers(0, n_workers, (len(truth), per_item))
    while True:
        ordered = np.sort(chosen, axis=1)
        twice = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
        if not twice.any():
            break
        chosen[twice] = rng.integers(0, n_workers, (int(twice.sum()), per_item))
    item = np.repeat(np.arange(len(truth)), per_item)
    worker = names[chosen.reshape(-1)]
    kinds = np.array(list(kind.values()))[chosen.reshape(-1)]
    rating = answer(truth[item].astype(np.float64), kinds, 0.6, rng)
    flagged = flags(bad[item], kinds, rng)
    rating[flagged] = 0
    return Crowd(RatingArrays(item, worker, rating, flagged), truth, bad, kind)


def measure(n_items: int, how: str = "model", seed: int = 0) -> dict[str, Any]:
    """One batch of `n_items` labelled by label_batch under the label policy `how`: seconds, items/s, peak RSS
    of this process so far (MiB), and the labels' mean (a check that it labelled)."""
    crowd = large_crowd(n_items, seed=seed)
    tasks, people = batch_tasks(crowd, seed), people_answers(crowd)
    start, cpu = time.perf_counter(), _cpu_seconds()
    done = label_batch(tasks, people, [], how)
    seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    return {
        "items": n_items,
        "how": how,
        "ratings": len(people),
        "workers": len(crowd.kind),
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 3),
        "items_per_s": round(n_items / seconds, 1),
        "peak_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "mean_label": float(np.nanmean(done.labels.label)),
    }


def _cpu_seconds() -> float:
    """This process's CPU time so far, user and system (on a shared machine steadier than the wall clock)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def in_child(n_items: int, how: str, seed: int) -> dict[str, Any]:
    """measure() in a fresh process, so the peak RSS is this batch's alone."""
    command = [sys.executable, "-m", "bench.annotate.import_speed", "--child", how, "--items", str(n_items)]
    done = subprocess.run([*command, "--seed", str(seed)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, nargs="+", default=[20000, 200000])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", choices=("model", "mean"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        found = measure(args.items[0], args.child, args.seed)
        print(json.dumps(found))
        return [found]
    rows = []
    print(HEADER)
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n_items in args.items:
        model, mean = in_child(n_items, "model", args.seed), in_child(n_items, "mean", args.seed)
        rows += [model, mean]
        cells = [n_items, model["ratings"], model["workers"], model["seconds"], model["cpu_seconds"]]
        cells += [model["items_per_s"]]
        cells += [model["peak_mib"], mean["seconds"], mean["peak_mib"], round(model["seconds"] / mean["seconds"], 1)]
        print("| " + " | ".join(f"{c:,}" if isinstance(c, int) else str(c) for c in cells) + " |", flush=True)
    return rows


if __name__ == "__main__":
    main()
