"""Harder crowds and harder models through the commands' own step functions.

    python -m bench.annotate.harder_crowds --pairs 200 --seeds 2 [--ambiguity 0.4 --difficulty 0.3] [--ambiguity-sd SD]
        [--expert-share 0.05]

Items: STS-B sentence pairs (only as text; their labels are simulated) taken through `annotate export/import
--stage conditions` and `export --stage ratings` (testing.command_path.prepare_folder). The truth, the
people and the models come from testing.simulate and testing.simulate_models with the harder shapes: a shared
per-item ambiguity (sd `--ambiguity`) people and models both feel, a per-item difficulty (log-sd `--difficulty`)
on everyone's noise, and the harder models: correlated (its errors go with people's), overconfident (q too sure
for its noise), kind_wrong (says 5 with q = 0.99 on a hidden quarter of the items, "colour"), sure_five (5 with
q = 0.99 everywhere). A model's answers go through `annotate rate` (a model that serves them,
testing.chosen_model); people's through results files; every setting imports with `--aggregate model`
and follows `export --more` as a user would; `--ambiguity-sd` passes the import's option (the shared shift's sd the
rater model assumes, as a user who knows the crowd's sets it; default: chosen from the answers); `--expert-share`
gives every import `--expert`, the truth of a seeded share of the items rounded (the figures are then on the
other items).

Prints per setting (mean over seeds): Spearman with the truth overall and within the high and low conditions,
human ratings per item, 90% coverage overall and on the "colour" quarter, mean label error on the colour quarter
and elsewhere, the model's reliability, whether workers.parquet marks it unreliable, the human ratings the
import says it replaced, the shared shift's sd the last import used, and how far apart the people's answers
told the spreads (sd_evidence: the span of their log-likelihood over the grid, where the sd was chosen), and
how many items of known label calibrated the intervals (calibrated_on: 0 where none did).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from bench.annotate.real_text_models import STSB, cell, read_stsb
from csts_pipeline.stages.annotate.aggregation.em import shift
from csts_pipeline.testing.chosen_model import rate_with
from csts_pipeline.testing.command_path import Outcome, People, figures, label_with_people, prepare_folder
from csts_pipeline.testing.simulate import Crowd, simulate_crowd
from csts_pipeline.testing.simulate_models import HARDER_KINDS, kind_items, model_answers

ROUNDS = 6
SETTINGS = {"fixed 2": (2, 0), "--more": (1, ROUNDS)}  # people alone start at 2 with --more


def simulated(items: dict, seed: int, ambiguity: float, difficulty: float) -> tuple[Crowd, dict[str, int]]:
    """The simulator's truth, flags, shift and difficulty over the folder's items (pair p: item 2p high, 2p+1
    low), and each item id's index there."""
    crowd = simulate_crowd(n_items=len(items), per_item=1, seed=seed, ambiguity=ambiguity, difficulty=difficulty)
    index = {item: 2 * pair + (kind == "low") for item, (pair, kind) in items.items()}
    return crowd, index


def people_of(crowd: Crowd, index: dict[str, int]) -> People:
    ids = list(index)
    at = np.array([index[i] for i in ids])
    aimed, scale = crowd.felt(at)
    return People(
        truth={i: float(t) for i, t in zip(ids, crowd.truth[at])},
        kind=crowd.kind,
        bad={i for i, b in zip(ids, crowd.bad[at]) if b},
        shift={i: float(a - t) for i, a, t in zip(ids, aimed, crowd.truth[at])},
        scale={i: float(s) for i, s in zip(ids, scale)},
    )


def model_figures(folder: Path) -> dict:
    """The shared shift's sd the rater model used, and the model worker's reliability, unreliable mark and
    replaced ratings, as the import wrote them."""
    agreement = json.loads((folder / "ratings" / "agreement.json").read_text())
    model = agreement["model_workers"]
    spread = {"ambiguity_sd": model["ambiguity_sd"], "sd_evidence": shift.evidence_span(model)}
    spread["calibrated_on"] = model.get("interval_calibrated_on", 0)
    workers = [
        r
        for r in pq.read_table(folder / "ratings" / "workers.parquet").to_pylist()
        if r["worker_id"].startswith("model:")
    ]
    if not workers:
        return spread
    share = agreement["model_workers"]["model_share"]
    return spread | {
        "model_reliability": workers[0]["reliability"],
        "model_unreliable": float(workers[0]["unreliable"]),
        "replaced_ratings": share["replaced_ratings"] / len(workers) if share else None,
    }


def run(
    base: Path,
    crowd: Crowd,
    index: dict,
    model: str | None,
    setting: str,
    seed: int,
    work: Path,
    ambiguity_sd: float | None = None,
    then: Callable[[Path, Outcome, dict[str, float]], dict] | None = None,
    expert_share: float = 0.0,
) -> dict:
    """One setting through the commands; `then(folder, outcome, truth)` adds its figures before the folder goes."""
    start, rounds = SETTINGS[setting]
    if model is None and rounds:
        start = 2
    folder = work / f"run-{seed}-{model}-{start}-{rounds}" / "annotate"
    shutil.rmtree(folder.parent, ignore_errors=True)
    shutil.copytree(base, folder)
    if model is not None:
        q, p_flag = model_answers(crowd, model, seed)
        rate_with(folder, model, {item: (q[i], float(p_flag[i])) for item, i in index.items()})
    people = people_of(crowd, index)
    expert, truth = expert_file(people.truth, expert_share, seed, folder.parent / "expert.csv")
    scratch = folder.parent / "results"
    outcome = label_with_people(folder, people, start, rounds, scratch, seed, None, ambiguity_sd, expert)
    wrong = kind_items(crowd.n_items, seed)
    colour = {item: "colour" if wrong[i] else "other" for item, i in index.items()}
    found = figures(folder, truth, colour)
    by_type = figures(folder, truth, {item: "high" if i % 2 == 0 else "low" for item, i in index.items()})
    found |= {k: v for k, v in by_type.items() if k.startswith("spearman[")}
    found["human_per_item"] = outcome.human_ratings / len(index)
    found |= model_figures(folder)
    if then is not None:
        found |= then(folder, outcome, people.truth)
    shutil.rmtree(folder.parent)
    return found


def expert_file(truth: dict[str, float], share: float, seed: int, path: Path) -> tuple[Path | None, dict]:
    """`--expert`'s file for a seeded `share` of the items (their truth rounded), and the truth of the others."""
    if share <= 0:
        return None, truth
    ids = sorted(truth)
    held = set(np.random.default_rng(seed + 7).choice(ids, max(1, round(share * len(ids))), replace=False))
    rows = "".join(f"{i},{int(np.clip(np.floor(truth[i] + 0.5), 1, 5))}\n" for i in sorted(held))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("item_id,label\n" + rows)
    return path, {i: v for i, v in truth.items() if i not in held}


COLUMNS = (
    "spearman",
    "spearman[high]",
    "spearman[low]",
    "human_per_item",
    "coverage",
    "coverage[colour]",
    "error[colour]",
    "error[other]",
    "model_reliability",
    "model_unreliable",
    "replaced_ratings",
    "ambiguity_sd",
    "sd_evidence",
    "calibrated_on",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stsb", type=Path, default=STSB)
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--ambiguity", type=float, default=0.4)
    parser.add_argument("--difficulty", type=float, default=0.3)
    parser.add_argument("--ambiguity-sd", type=float, default=None, help="the import's --ambiguity-sd")
    parser.add_argument("--expert-share", type=float, default=0.0, help="the share of items given to --expert")
    args = parser.parse_args()
    pairs = read_stsb(args.stsb, args.pairs, 0)
    print(
        f"{len(pairs)} pairs ({2 * len(pairs)} items); ambiguity sd {args.ambiguity}, difficulty log-sd "
        f"{args.difficulty}; {args.seeds} seeds; the import's --ambiguity-sd {args.ambiguity_sd}; expert sample "
        f"{args.expert_share:.0%}"
    )
    found: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="harder-") as tmp:
        work = Path(tmp)
        base = work / "base" / "annotate"
        items = prepare_folder([(p["s1"], p["s2"]) for p in pairs], base)
        for seed in range(args.seeds):
            crowd, index = simulated(items, seed, args.ambiguity, args.difficulty)
            for model in (None, *HARDER_KINDS):
                for setting in SETTINGS:
                    name = f"{'people alone' if model is None else 'people + ' + model}, {setting}"
                    found.setdefault(name, []).append(
                        run(
                            base,
                            crowd,
                            index,
                            model,
                            setting,
                            seed,
                            work,
                            args.ambiguity_sd,
                            expert_share=args.expert_share,
                        )
                    )
                    print(
                        f"  seed {seed} {name}: " + ", ".join(f"{k} {v}" for k, v in found[name][-1].items()),
                        flush=True,
                    )
    print("| setting | " + " | ".join(COLUMNS) + " |")
    print("|---|" + "---:|" * len(COLUMNS))
    for name, runs in found.items():
        print(f"| {name} | " + " | ".join(cell([r.get(c) for r in runs]) for c in COLUMNS) + " |")


if __name__ == "__main__":
    main()
