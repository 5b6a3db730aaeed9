"""How far the people's answers tell a crowd with a shared per-item shift from one without, through the commands
(harder crowds: what the answers say about the shift's sd).

    python -m bench.annotate.ambiguity_evidence --pairs 200 --seeds 2

Runs every setting of bench/annotate/harder_crowds.py on two crowds: "harder" (a shared shift of sd 0.4 and a per-item
difficulty of log-sd 0.3, as that bench) and "plain" (neither). After each setting's last import (the sd chosen
from the answers, as by default), it imports the same results files again with `--ambiguity-sd` at each spread
of the grid and prints, per run: the sd the answers chose, the 90% coverage at each spread, the people's
log-likelihood at each spread (agreement.json's `ambiguity_sd_log_likelihood`, relative to the best) and the
likelihood-only mean sd (each spread weighed by its likelihood, no prior). A rule that reads the sd from the
answers can meet 85-95% on both crowds only if the harder crowd's runs favour larger spreads than the plain
crowd's; the last lines say how often they do not.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from bench.annotate.harder_crowds import SETTINGS, run, simulated
from bench.annotate.real_text_models import STSB, read_stsb
from csts_pipeline.stages.annotate.aggregation.em import shift
from csts_pipeline.testing.command_path import Outcome, figures, import_model, prepare_folder
from csts_pipeline.testing.simulate_models import HARDER_KINDS

CROWDS = {"harder": (0.4, 0.3), "plain": (0.0, 0.0)}  # shared shift sd, difficulty log-sd
BAND = {"harder": (0.85, 0.95), "plain": (0.85, 0.97)}  # coverage wanted (plain: the models tests' bound)


def coverage_at_each_spread(folder: Path, outcome: Outcome, truth: dict[str, float]) -> dict:
    """The people's log-likelihood per spread from the import that chose the sd, then the same answers imported
    again at every spread of the grid: the coverage each gives."""
    agreement = json.loads((folder / "ratings" / "agreement.json").read_text())
    found: dict = {"profile": agreement["model_workers"]["ambiguity_sd_log_likelihood"]}
    for spread in shift.AMBIGUITY_GRID:
        import_model(folder, outcome.results, float(spread))
        found[f"coverage@{spread:.2f}"] = figures(folder, truth)["coverage"]
    return found


def likelihood_mean_sd(profile: dict[str, float]) -> float:
    """The spreads' mean weighed by the people's likelihood alone (a flat prior over the grid)."""
    spreads = np.array([float(s) for s in profile])
    weight = np.exp(np.array(list(profile.values())))
    return float((spreads * weight).sum() / weight.sum())


def one_crowd(name: str, items: dict, base: Path, seeds: int, work: Path) -> list[dict]:
    """Every setting of bench/annotate/harder_crowds.py on one crowd of CROWDS, each seed, printed as it ends."""
    ambiguity, difficulty = CROWDS[name]
    runs = []
    for seed in range(seeds):
        crowd, index = simulated(items, seed, ambiguity, difficulty)
        for model in (None, *HARDER_KINDS):
            for setting in SETTINGS:
                found = run(base, crowd, index, model, setting, seed, work, None, coverage_at_each_spread)
                who = "people alone" if model is None else f"people + {model}"
                found["setting"] = f"{name} crowd {seed}, {who}, {setting}"
                found["mean_sd"] = likelihood_mean_sd(found["profile"])
                found["in_band"] = spreads_in_band(found, name)
                runs.append(found)
                print(line(found), flush=True)
    return runs


def line(found: dict) -> str:
    """A run as a row of the printed table."""
    covered = " ".join(f"{found[f'coverage@{s:.2f}']:.3f}" for s in shift.AMBIGUITY_GRID)
    profile = " ".join(f"{v:6.2f}" for v in found["profile"].values())
    return (
        f"| {found['setting']} | {found['ambiguity_sd']:.2f} | {found['coverage']:.3f} | {covered} | {profile} | "
        f"{found['mean_sd']:.2f} |"
    )


def spreads_in_band(found: dict, crowd: str) -> list[float]:
    """The grid's spreads at which the run's coverage is in its crowd's BAND."""
    low, high = BAND[crowd]
    return [s for s in shift.AMBIGUITY_GRID if low <= found[f"coverage@{s:.2f}"] <= high]


def inverted_pairs(runs: dict[str, list[dict]]) -> str:
    """Pairs of a harder run and a plain run where the harder one's answers favour larger spreads no more than
    the plain one's (likelihood mean sd) while it needs a larger spread to cover 85-95% than the plain one can
    take and stay in its band: a rule that never picks a smaller sd where the answers favour larger spreads
    fails one of the two."""
    pairs = [
        (h, p)
        for h in runs["harder"]
        for p in runs["plain"]
        if h["in_band"] and p["in_band"] and h["mean_sd"] <= p["mean_sd"] and min(h["in_band"]) > max(p["in_band"])
    ]
    if not pairs:
        return "inverted pairs: none (the answers order every harder run above the plain runs it must differ from)"
    h, p = max(pairs, key=lambda hp: hp[1]["mean_sd"] - hp[0]["mean_sd"])
    harder = sorted({h["setting"] for h, _ in pairs})
    return (
        f"inverted pairs: {len(pairs)} of {len(runs['harder']) * len(runs['plain'])}, from {len(harder)} of "
        f"{len(runs['harder'])} harder runs ({'; '.join(harder)}); the widest: {h['setting']} (likelihood mean sd "
        f"{h['mean_sd']:.2f}; covers 85-95% from sd {min(h['in_band']):.2f}) against {p['setting']} "
        f"({p['mean_sd']:.2f}; covers at most 97% up to sd {max(p['in_band']):.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stsb", type=Path, default=STSB)
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    pairs = read_stsb(args.stsb, args.pairs, 0)
    grid = " ".join(f"{s:.2f}" for s in shift.AMBIGUITY_GRID)
    print(f"{len(pairs)} pairs ({2 * len(pairs)} items); {args.seeds} seeds; spreads {grid}")
    print(f"| run | sd chosen | coverage | coverage at {grid} | log-likelihood at {grid} | likelihood mean sd |")
    print("|---|---:|---:|---|---|---:|")
    with tempfile.TemporaryDirectory(prefix="evidence-") as tmp:
        work = Path(tmp)
        base = work / "base" / "annotate"
        items = prepare_folder([(p["s1"], p["s2"]) for p in pairs], base)
        runs = {name: one_crowd(name, items, base, args.seeds, work) for name in CROWDS}
    for name, found in runs.items():
        chosen = [r["coverage"] for r in found]
        none = sum(not r["in_band"] for r in found)
        print(
            f"{name}: coverage at the chosen sd {min(chosen):.3f}-{max(chosen):.3f}; runs no spread of the grid "
            f"brings into {BAND[name][0]}-{BAND[name][1]}: {none}/{len(found)}"
        )
    print(inverted_pairs(runs))


if __name__ == "__main__":
    main()
