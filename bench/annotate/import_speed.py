"""How fast `annotate import --stage ratings` runs on a large batch, `--aggregate model` and `--aggregate mean`
(200,000 items: the rater model in 30 s or less, the mean in 10 s or less, on 2 cores within 3 GiB), through the
command's own function on an annotate folder and a results file, as the user runs it.

    python -m bench.annotate.import_speed --items 20000 200000 [--work DIR]

Each size is one batch of a simulated crowd of people (testing.simulate's kinds of worker, noise and
flags; 3 distinct raters an item, one worker for every 20 items, so each gives about 60 ratings). Its annotate
folder is made as the user's is (testing.command_path's prepare_folder: `export --stage conditions`, a
conditions results file, `import --stage conditions`, `export --stage ratings`; a pair's two conditions are its
high and low items) and its answers written as one plain results CSV (item_id, worker_id, assignment_id, rating,
not_pertinent). With `--work` the folders are kept there and reused by a later run of the same size and seed.

What is timed is `steps.ratings.import_ratings`, the function `annotate import --stage ratings --aggregate HOW
--force` calls: fingerprints, reading and screening the results, the labels
(the rater model or the mean), the not-pertinent verdict, agreement, the workers table, the high-against-low check
and writing the folder's files. Each label policy runs in its own process (`--child`), so its peak RSS is its own.
Prints, per size: wall seconds, CPU seconds (user and system), items/s and peak RSS of each policy, and the ratio of
model to mean in wall and CPU seconds. On a shared machine the CPU seconds are the steadier figure."""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from csts_pipeline.stages.annotate.labels.agreement import RatingArrays
from csts_pipeline.stages.annotate.steps.options import RatingsImportOptions
from csts_pipeline.stages.annotate.steps.ratings import import_ratings
from csts_pipeline.testing.command_path import prepare_folder
from csts_pipeline.testing.simulate import Crowd, answer, crowd_workers, flags, truth_labels

ITEMS_PER_WORKER = 20  # workers = items / this (simulate_crowd's default: 400 items, 20 workers)
PER_ITEM = 3
POLICIES = ("model", "mean")
HEADER = (
    "| items | ratings | workers | model s | model CPU s | model items/s | model peak MiB"
    " | mean s | mean CPU s | mean peak MiB | model / mean (wall, CPU) |"
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


def prepare(n_items: int, work: Path, seed: int = 0) -> Path:
    """The annotate folder of a batch of `n_items` (made under `work`, or reused when made before with the same
    size and seed) with its results file beside it; returns the folder of the size (annotate/ and results.csv)."""
    where = work / f"items-{n_items}-seed-{seed}"
    made = where / "prepared.json"
    if made.is_file():
        return where
    crowd = large_crowd(n_items, seed=seed)
    pairs = [(f"A scene {p}.", f"Another scene {p}.") for p in range(n_items // 2)]
    items = prepare_folder(pairs, where / "annotate")
    by_item = {(pair, kind): item for item, (pair, kind) in items.items()}
    ids = np.array([by_item[i // 2, "high" if i % 2 == 0 else "low"] for i in range(n_items)], object)
    write_results(where / "results.csv", crowd.ratings, ids)
    made.write_text(json.dumps({"items": n_items, "seed": seed, "ratings": len(crowd.ratings.item),
                                "workers": len(crowd.kind)}))  # fmt: skip
    return where


def write_results(path: Path, ratings: RatingArrays, ids: np.ndarray) -> Path:
    """The people's answers as a plain results CSV: a flagged answer has no rating and not_pertinent true."""
    n = len(ratings.item)
    rating = np.where(ratings.flagged, "", ratings.rating.astype(np.int64).astype(str))
    table = pa.table(
        {
            "item_id": ids[ratings.item].astype(str),
            "worker_id": ratings.worker.astype(str),
            "assignment_id": np.char.add("a-", np.arange(n).astype(str)),
            "rating": rating,
            "not_pertinent": np.where(ratings.flagged, "true", "false"),
        }
    )
    pacsv.write_csv(table, path)
    return path


def measure(where: Path, how: str) -> dict[str, Any]:
    """`annotate import --stage ratings --aggregate how --force` on the prepared folder `where`: wall and CPU
    seconds, items/s, this process's peak RSS (MiB) and the labels' mean (a check that it labelled)."""
    prepared = json.loads((where / "prepared.json").read_text())
    folder, results = where / "annotate", [where / "results.csv"]
    start, cpu = time.perf_counter(), _cpu_seconds()
    import_ratings(folder, results, RatingsImportOptions(aggregate=how), force=True)
    seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    label = pq.read_table(folder / "ratings" / "items.parquet", columns=["label"]).column("label")
    return {
        **prepared,
        "how": how,
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 3),
        "items_per_s": round(prepared["items"] / seconds, 1),
        "peak_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "mean_label": float(np.nanmean(label.to_numpy(zero_copy_only=False).astype(float))),
    }


def _cpu_seconds() -> float:
    """This process's CPU time so far, user and system (on a shared machine steadier than the wall clock)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def in_child(where: Path, how: str) -> dict[str, Any]:
    """measure() in a fresh process, so the peak RSS is this policy's alone."""
    command = [sys.executable, "-m", "bench.annotate.import_speed", "--child", how, "--folder", str(where)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, nargs="+", default=[20000, 200000])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, help="keep the prepared folders here (default: a temporary folder)")
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    parser.add_argument("--child", choices=POLICIES, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        found = measure(args.folder, args.child)
        print(json.dumps(found))
        return [found]
    with tempfile.TemporaryDirectory() as scratch:
        return _run(args, args.work or Path(scratch))


def _run(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    rows = []
    print(HEADER)
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    for n_items in args.items:
        where = prepare(n_items, work, args.seed)
        found = {how: in_child(where, how) for how in args.policies}
        rows += found.values()
        model, mean = found.get("model"), found.get("mean")
        cells = [n_items, (model or mean)["ratings"], (model or mean)["workers"]]
        cells += [model[key] if model else "" for key in ("seconds", "cpu_seconds", "items_per_s", "peak_mib")]
        cells += [mean[key] if mean else "" for key in ("seconds", "cpu_seconds", "peak_mib")]
        both = model is not None and mean is not None
        ratio = [model[key] / mean[key] for key in ("seconds", "cpu_seconds")] if both else []
        cells += [", ".join(f"{r:.1f}" for r in ratio)]
        print("| " + " | ".join(f"{c:,}" if isinstance(c, int) else str(c) for c in cells) + " |", flush=True)
    return rows


if __name__ == "__main__":
    main()
