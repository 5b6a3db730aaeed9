"""A real crowd for the rater model: USTS's raters as the batch's people, the rest of them as the truth
(trust from evidence).

    python -m bench.annotate.usts_crowd --seeds 3 [--pairs N] [--k 1 2 3 5] [--expert-share 0.05]
    python -m bench.annotate.usts_crowd --file ustsu_train.json --k 1 2 3   # USTS-U: 4 raters a pair

Items: USTS (Wang et al., TACL 2023; MIT) pairs, real Chinese sentence pairs with every rater's own score kept: by
default the USTS-C train file (2,051 pairs, each rated 0-5 by the same 19 people, the position in
`raw_annotation` being the rater, each with a steady bias of their own), all pairs or a seeded `--pairs` of them,
taken through `annotate export --stage conditions`, `import --stage conditions` (two neutral conditions a pair, so
two items a pair, both carrying the pair's ratings) and `export --stage ratings` (testing.command_path's
prepare_folder). People: each item draws `k` of the pair's raters (seeded, per item) as the batch's people, worker
id their position (`r07`), so a rater keeps their identity across items; their 0-5 scores become 1-5 answers
(1 + 0.8 x score, rounded, clipped). The truth of an item is the mean of the raters it did not draw, on the same
scale, not rounded. Every run is `annotate import --stage ratings --aggregate model` through the command's own
function, without and with `--expert` (an `item_id,label` file of the truth of a seeded `--expert-share` of the
items); both arms are scored on the items outside that sample. No similarity model: the people alone.

Prints per k and arm, mean over `--seeds` (range over seeds in brackets): Spearman of the labels with the truth,
Spearman of the mean of the same k answers with the truth (the baseline), the 90% interval coverage of the rounded
truth (items.parquet's interval_low/high), the shared-shift sd the import chose and what chose it (agreement.json's
model_workers ambiguity_sd and ambiguity_sd_from), and how the people were measured (model_workers.trust's
people_measured_by). With k = 1 no item has two people, so without the sample nothing measures them (the import
summary says the weights were assumed)."""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from bench.shared_data import SHARED
from csts_pipeline.stages.annotate.aggregation import trust
from csts_pipeline.stages.annotate.steps.options import RatingsImportOptions
from csts_pipeline.stages.annotate.steps.ratings import import_ratings
from csts_pipeline.testing.command_path import figures, prepare_folder, task_ids, write_results

USTS = SHARED / "data" / "usts"
USTS_C = "ustsc_train.json"
KS = (1, 2, 3, 5)
ARMS = ("no evidence", "expert sample")


def read_usts(path: Path, n_pairs: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """USTS pairs in file order (`n_pairs`: a seeded sample of that many, in file order): id, s1, s2 and the raw
    scores (0-5, one a rater position)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    pairs = [{"id": key, "s1": v["s1"], "s2": v["s2"], "raw": [float(x) for x in v["raw_annotation"]]}
             for key, v in data.items()]  # fmt: skip
    if n_pairs is not None and n_pairs < len(pairs):
        keep = np.sort(np.random.default_rng(seed).choice(len(pairs), n_pairs, replace=False))
        pairs = [pairs[i] for i in keep]
    return pairs


def to_scale(score: np.ndarray) -> np.ndarray:
    """0-5 scores on the labels' 1-5 scale, not rounded."""
    return 1 + 0.8 * np.asarray(score, float)


def draw(pairs: list[dict], items: dict[str, tuple[int, str]], k: int, seed: int) -> tuple[list[dict], dict, dict]:
    """`k` of its pair's raters for every item (seeded): the results rows (the rounded, clipped answers), the truth
    per item (the mean of the raters not drawn) and the mean of the k answers per item (the baseline)."""
    rng = np.random.default_rng(seed)
    rows: list[dict] = []
    truth: dict[str, float] = {}
    mean: dict[str, float] = {}
    for item in sorted(items):
        raw = np.array(pairs[items[item][0]]["raw"])
        if k >= len(raw):
            raise SystemExit(f"k={k} leaves no rater of {len(raw)} for the truth")
        chosen = np.sort(rng.choice(len(raw), k, replace=False))
        answers = np.clip(np.rint(to_scale(raw[chosen])), 1, 5).astype(int)
        rest = np.delete(raw, chosen)
        truth[item] = float(to_scale(rest.mean()))
        mean[item] = float(answers.mean())
        rows += [{"item_id": item, "worker_id": f"r{w:02d}", "rating": int(a), "not_pertinent": "false"}
                 for w, a in zip(chosen, answers)]  # fmt: skip
    return rows, truth, mean


def run(folder: Path, rows: list[dict], truth: dict, mean: dict, expert: Path | None, held: set[str]) -> dict:
    """One `import --stage ratings --aggregate model` through the command's function; figures on the items
    outside `held` (the expert sample)."""
    results = write_results(folder.parent / "results.csv", rows)
    record = import_ratings(folder, [results], RatingsImportOptions(aggregate="model", expert=expert), force=True)
    scored = {i: t for i, t in truth.items() if i not in held}
    found = figures(folder, scored)
    ids = sorted(scored)
    found["baseline"] = float(spearmanr([mean[i] for i in ids], [truth[i] for i in ids]).statistic)
    workers = json.loads((folder / "ratings" / "agreement.json").read_text())["model_workers"]
    found["ambiguity_sd"] = workers.get("ambiguity_sd")
    found["ambiguity_sd_from"] = workers.get("ambiguity_sd_from")
    found["measured_by"] = (workers.get("trust") or {}).get("people_measured_by")
    found["summary"] = trust.summary_words(workers)
    found["record"] = record
    return found


def crowd(pairs: list[dict], ks: tuple[int, ...], seeds: int, share: float, work: Path, say=print) -> dict:
    """Every k and arm over `seeds` seeds on one prepared folder: {(k, arm): [figures per seed]}."""
    folder = work / "annotate"
    items = prepare_folder([(p["s1"], p["s2"]) for p in pairs], folder)
    ids = task_ids(folder / "ratings_tasks")
    assert set(ids) == set(items), "the export holds items that are not the pairs' (controls?)"
    found: dict[tuple[int, str], list[dict]] = {}
    for seed in range(seeds):
        rng = np.random.default_rng(seed + 1000)
        held = set(rng.choice(sorted(ids), max(1, round(share * len(ids))), replace=False).tolist())
        for k in ks:
            rows, truth, mean = draw(pairs, items, k, seed * 100 + k)
            expert = work / "expert.csv"
            expert.write_text("item_id,label\n" + "".join(f"{i},{truth[i]:.2f}\n" for i in sorted(held)))
            for arm, given in zip(ARMS, (None, expert)):
                one = run(folder, rows, truth, mean, given, held)
                found.setdefault((k, arm), []).append(one)
                say(f"seed {seed}, k={k}, {arm}: " + line(one))
    return found


def line(one: dict) -> str:
    return (
        f"labels {one['spearman']:.3f}, mean of the k {one['baseline']:.3f}, coverage {one['coverage']:.3f}, "
        f"shift sd {one['ambiguity_sd']} ({one['ambiguity_sd_from']}), people by {one['measured_by']}"
    )


def cell(values: list[float]) -> str:
    return f"{np.mean(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def table(found: dict[tuple[int, str], list[dict]]) -> list[str]:
    """The Markdown table: one row per k and arm, means over seeds."""
    lines = [
        "| k | import | labels | mean of the k | labels - mean | 90% coverage | shift sd (from) | people measured by |",
        "|---:|---|---:|---:|---:|---:|---|---|",
    ]
    for (k, arm), runs in found.items():
        gain = [r["spearman"] - r["baseline"] for r in runs]
        sds = [r["ambiguity_sd"] for r in runs if r["ambiguity_sd"] is not None]
        sd = f"{np.mean(sds):.2f}" if sds else "-"
        counted = Counter(str(r["ambiguity_sd_from"]) for r in runs).items()
        source = "; ".join(f"{name} x{n}" if n > 1 else name for name, n in counted)
        by = "; ".join(sorted({str(r["measured_by"]) for r in runs}))
        lines.append(
            f"| {k} | {arm} | {cell([r['spearman'] for r in runs])} | {cell([r['baseline'] for r in runs])} | "
            f"{np.mean(gain):+.3f} | {cell([r['coverage'] for r in runs])} | {sd} ({source}) | {by} |"
        )
    return lines


def main(argv: list[str] | None = None) -> dict[tuple[int, str], list[dict]]:
    """The bench from the command line (`argv`); returns its figures, {(k, arm): [per seed]}."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--usts", type=Path, default=USTS, help="the folder of the USTS JSON files")
    parser.add_argument("--file", default=USTS_C, help="ustsc_train.json (19 raters) or ustsu_train.json (4)")
    parser.add_argument("--pairs", type=int, default=None, help="a seeded sample of this many pairs (default all)")
    parser.add_argument("--k", type=int, nargs="+", default=None, help="raters an item (default 1 2 3 5; USTS-U 1 2 3)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--expert-share", type=float, default=0.05)
    args = parser.parse_args(argv)
    pairs = read_usts(args.usts / args.file, args.pairs)
    raters = min(len(p["raw"]) for p in pairs)
    ks = tuple(args.k) if args.k else tuple(k for k in KS if k < raters)
    print(
        f"{args.file}: {len(pairs)} pairs ({2 * len(pairs)} items), {raters} raters a pair; k = {list(ks)}; "
        f"expert sample {args.expert_share:.0%}; {args.seeds} seeds\n"
    )
    with tempfile.TemporaryDirectory(prefix="usts-") as tmp:
        found = crowd(pairs, ks, args.seeds, args.expert_share, Path(tmp))
    print("\n" + "\n".join(table(found)) + "\n")
    for k in ks:
        for arm in ARMS:
            print(f"k={k}, {arm}, the import summary: {found[(k, arm)][-1]['summary']}")
    return found


if __name__ == "__main__":
    main()
