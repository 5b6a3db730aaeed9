"""Where each worker's reliability comes from: the evidence the batch holds, said per worker, never assumed for one
side only (trust from evidence). A person's reliability is measured by items whose label is known (an expert sample,
`--expert`; the hidden gold) or by other people who rated the same items (repeats): the rater model fits them freely
(em/ordinal.py). Without any of these, one person and one model an item leave only their agreement identified, the
product of their reliabilities, and an EM that starts from the person measures the model against a posterior the
person dominates, so the person is always right. Then the rule is symmetric: people are pinned at the reliability
their agreement with the models implies (`people_reliability`): with one model, the square root of the agreement,
the same as the model's; with two or more, the triad rule sqrt(a_pm a_pn / a_mn), which three raters identify.

A model earns a place by agreeing with the people beyond chance (`informative`): a no-skill or constant model
agrees with nothing and is left out whole, so the people's labels stand. That is a test on what is observed, the
agreement and how many items it rests on, not a cut on a reliability estimated against the people themselves."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import rankdata

from csts_pipeline.stages.annotate.aggregation import thresholds
from csts_pipeline.stages.annotate.aggregation.em import em_answers, kernel, ordinal
from csts_pipeline.stages.annotate.aggregation.model_workers import model_name, pooled_reliability
from csts_pipeline.stages.annotate.labels.agreement import RatingArrays, grouped_spearman

EXPERT, GOLD, REPEATS, AGREEMENT, ASSUMED = "expert sample", "gold", "repeats", "agreement", "assumed"
TEST = "qualification test"  # a person's answers on the qualification test's rating items (their gold known)
KNOWN = "known labels"
NO_EVIDENCE = "no expert sample, gold, repeats or qualification test"
POOLED_ON = {KNOWN: "noise measured pooled on the items of known label",
             REPEATS: "reliability measured pooled by their agreement on the items two or more rated"}  # fmt: skip


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's correlation (0 where either side is constant or fewer than three pairs)."""
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return 0.0
    return float(np.corrcoef(rankdata(x), rankdata(y))[0, 1])


def item_means(item: np.ndarray, value: np.ndarray, n_items: int) -> np.ndarray:
    """Per item, the mean of its values (nan without one)."""
    count = np.bincount(item, minlength=n_items)
    total = np.bincount(item, weights=value, minlength=n_items)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / count, np.nan)


def agreement(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    """Spearman of two per-item series over the items both have, and how many."""
    both = ~np.isnan(a) & ~np.isnan(b)
    return spearman(a[both], b[both]), int(both.sum())


def z_score(r: float, n: int) -> float:
    """Fisher's z of a correlation over n items, in standard errors from zero."""
    return float(np.arctanh(np.clip(r, -0.999999, 0.999999)) * np.sqrt(max(n - 3, 0)))


def worse(kind: tuple[float, int], rest: tuple[float, int]) -> bool:
    """A kind's agreement thresholds.INFORMATIVE_Z standard errors below the rest's (Fisher's z of the difference)."""
    (r_kind, n_kind), (r_rest, n_rest) = kind, rest
    if n_kind <= 3 or n_rest <= 3:
        return False
    gap = np.arctanh(np.clip(r_rest, -0.999999, 0.999999)) - np.arctanh(np.clip(r_kind, -0.999999, 0.999999))
    return bool(gap / np.sqrt(1 / (n_kind - 3) + 1 / (n_rest - 3)) >= thresholds.INFORMATIVE_Z)


@dataclass
class ModelAgreement:
    """One model's agreement with the people (Spearman of its expected answer with their mean rating per item)
    over the kinds of condition it kept, and per kind (`kinds`: agreement, items); `dropped`: the kinds where
    its agreement is thresholds.INFORMATIVE_Z standard errors below its agreement on the others (it answers them without
    information: a constant answer on colour), left out as evidence, not for want of it."""

    name: str
    agreement: float
    items: int
    kinds: dict[str, tuple[float, int]] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)

    @property
    def z(self) -> float:
        return z_score(self.agreement, self.items)

    @property
    def informative(self) -> bool:
        return self.z >= thresholds.INFORMATIVE_Z


@dataclass
class TrustPlan:
    """What the batch's evidence settles before the rater model runs: per model its agreement with the people and
    whether it carries information; the people's evidence per worker; and the reliability they are pinned at
    where nothing measures them, or where it is measured pooled (`pooled`) (None: fitted by the EM)."""

    models: dict[str, ModelAgreement]
    evidence: dict[str, dict[str, int]]  # person -> {kind of evidence: their ratings it covers}
    people_measured: bool
    people_reliability: float | None = None
    rule: str = ""
    model_pairs: dict[str, float] = field(default_factory=dict)
    mode: str = ASSUMED  # how the people are measured: REPEATS (EM on their overlap), KNOWN (pinned at what the
    # items of known label measure), ASSUMED (pinned by the symmetric rule, or people alone)
    balance: dict[float, float] = field(default_factory=dict)  # the equal rule's search: people's reliability -> gap
    relative: dict[str, float] = field(default_factory=dict)  # per person, their agreement with the models over
    # the people's (shrunk): where nothing measures the people, who is better than whom is still measured
    known_in_batch: bool = False  # the batch's own items of known label (expert sample, gold) measure, not only
    # the qualification test: a similarity model's score density is measured on them
    short: str = NO_EVIDENCE  # what evidence was given and why it did not measure the people (shortfall)
    pooled: bool = False  # the people held at one pooled noise (POOLED_ON): KNOWN where a model answers or the test
    # measures them out of the fit; REPEATS where a model answers and repeats are sparse (SPARSE_REPEATS_BELOW)

    @property
    def left_out(self) -> list[str]:
        return [name for name, m in self.models.items() if not m.informative]

    def summary(self) -> dict[str, Any]:
        models = {
            name: {
                "agreement": round(m.agreement, 4),
                "items": m.items,
                "z": round(m.z, 2),
                "informative": m.informative,
                "kinds_left_out": m.dropped,
            }
            for name, m in self.models.items()
        }
        people = None if self.people_reliability is None else round(self.people_reliability, 4)
        tested = sum(e.get(TEST, 0) for e in self.evidence.values())
        kinds = (EXPERT, GOLD, REPEATS, TEST)
        by_kind = {kind: sum(1 for e in self.evidence.values() if e.get(kind)) for kind in kinds}
        return {"people_measured": self.people_measured, "people_measured_by": self.mode,
                "people_pooled": self.pooled, "people_reliability": people, "rule": self.rule,
                "informative_z": thresholds.INFORMATIVE_Z, "models": models, "qualification_ratings": tested,
                "people": len(self.evidence), "people_by_evidence": by_kind,
                "evidence_short": self.short}  # fmt: skip


def people_evidence(
    people: RatingArrays, known: np.ndarray, anchor: RatingArrays | None, test: RatingArrays | None = None
) -> dict[str, dict[str, int]]:
    """Per person, how many of their ratings fall on known items (the expert sample), on the gold, on items
    another person rated too (repeats) and on the qualification test's rating items (`test`)."""
    rated = people.subset(people.rated)
    names, code = np.unique(people.worker.astype(str), return_inverse=True)
    mine = code[people.rated]
    per_item = np.bincount(rated.item, minlength=len(known))
    counts = {
        EXPERT: np.bincount(mine, weights=known[rated.item] > 0, minlength=len(names)),
        REPEATS: np.bincount(mine, weights=per_item[rated.item] >= 2, minlength=len(names)),
    }
    for kind, given in ((GOLD, anchor), (TEST, test)):
        if given is not None:
            counts[kind] = np.bincount(_worker_codes(names, given.subset(given.rated).worker), minlength=len(names))
    return {str(n): {kind: int(c[i]) for kind, c in counts.items()} for i, n in enumerate(names)}


def _worker_codes(names: np.ndarray, workers: np.ndarray) -> np.ndarray:
    """The index in `names` (sorted) of each of `workers` that is among them."""
    at = np.searchsorted(names, workers.astype(str))
    return at[(at < len(names)) & (names[np.minimum(at, len(names) - 1)] == workers.astype(str))]


def model_agreement(name: str, people: np.ndarray, theirs: np.ndarray, kinds: np.ndarray | None) -> ModelAgreement:
    """A model's agreement with the people per item (`people`, `theirs`: per-item means, nan where none), per kind
    of condition (`kinds` per item), with the kinds it answers without information dropped."""
    if kinds is None:
        return ModelAgreement(name, *agreement(people, theirs))
    per_kind = {str(k): agreement(people[kinds == k], theirs[kinds == k]) for k in np.unique(kinds)}
    dropped = []
    for kind in per_kind:
        rest = kinds != kind
        if per_kind[kind][1] and worse(per_kind[kind], agreement(people[rest], theirs[rest])):
            dropped.append(kind)
    kept = ~np.isin(kinds, dropped)
    return ModelAgreement(name, *agreement(people[kept], theirs[kept]), per_kind, dropped)


def plan(
    ratings: RatingArrays,
    n_items: int,
    *,
    known: np.ndarray | None = None,
    anchor: RatingArrays | None = None,
    kinds: np.ndarray | None = None,
    test: RatingArrays | None = None,
) -> TrustPlan:
    """The trust plan for a batch's ratings (model rows named `model:<name>`), `kinds` per item the kind of its
    condition (model_workers.condition_kinds) or None; `test`: the people's answers on the qualification test's
    rating items (steps/qualification.test_answers)."""
    known = np.zeros(n_items, np.int64) if known is None else known
    rated = ratings.subset(ratings.rated)
    human = rated.human
    people = item_means(rated.item[human], rated.rating[human], n_items)
    expected = em_answers.answer_matrix(rated.rating, rated.distribution) @ ordinal.SCALE
    if rated.score is not None:  # a similarity model's whole score, not its bin
        expected = np.where(np.isnan(rated.score), expected, rated.score)
    owner = model_name(rated.worker)
    series = {
        str(name): item_means(rated.item[owner == name], expected[owner == name], n_items)
        for name in np.unique(owner[~human])
    }
    models = {name: model_agreement(name, people, s, kinds) for name, s in series.items()}
    on_gold = None if anchor is None else anchor.subset(anchor.human)
    evidence = people_evidence(ratings.subset(ratings.human), known, on_gold, test)
    count = {kind: sum(k.get(kind, 0) for k in evidence.values()) for kind in (EXPERT, GOLD, REPEATS, TEST)}
    useful = [m for m in models.values() if m.informative]
    known_enough = count[EXPERT] + count[GOLD] + count[TEST] >= thresholds.MIN_EVIDENCE
    # beside a model, a sparse sample of repeats measures the people pooled, and items of known label better
    sparse = bool(useful) and bool(count[REPEATS] < thresholds.SPARSE_REPEATS_BELOW * human.sum())
    if count[REPEATS] >= thresholds.MIN_EVIDENCE and not (sparse and known_enough):
        mode = REPEATS
    else:
        mode = KNOWN if known_enough else ASSUMED
    found = TrustPlan(models, evidence, mode != ASSUMED, mode=mode)
    found.short = shortfall(count, len(np.unique(rated.item[human & (known[rated.item] > 0)])))
    found.known_in_batch = count[EXPERT] + count[GOLD] >= thresholds.MIN_EVIDENCE
    known_pooled = mode == KNOWN and (bool(useful) or bool(count[TEST]) or not found.known_in_batch)
    found.pooled = known_pooled or (mode == REPEATS and sparse)
    if (mode != REPEATS or found.pooled) and useful:
        found.relative = relative_agreement(rated.subset(human), [series[m.name] for m in useful])
    if mode == ASSUMED and len(useful) >= 2:
        found.people_reliability, found.rule, found.model_pairs = pinned_reliability(useful, series)
    elif mode == ASSUMED and useful:
        found.rule = "equal"
    return found


def shortfall(count: dict[str, int], sample_items: int) -> str:
    """The evidence given, in words, and why it did not measure the people (too few ratings); NO_EVIDENCE where
    none was given. Why: "no expert sample" said of a sample of 19 rated items misleads."""
    known = [f"an expert sample of {sample_items} rated items ({count[EXPERT]} ratings)"] if count[EXPERT] else []
    known += [f"{count[GOLD]} ratings on the gold"] if count[GOLD] else []
    known += [f"{count[TEST]} ratings on the qualification test"] if count[TEST] else []
    parts = []
    if known:
        parts.append(f"{' and '.join(known)}, fewer than the {thresholds.MIN_EVIDENCE} ratings on items of known "
                     "label that measure the people")  # fmt: skip
    if count[REPEATS]:
        parts.append(f"{count[REPEATS]} ratings on items another person rated too, fewer than the "
                     f"{thresholds.MIN_EVIDENCE} that measure the people by their agreement")  # fmt: skip
    return "; ".join(parts) or NO_EVIDENCE


def unmeasured(short: str) -> str:
    """Why nothing measured the people, in words (shortfall's `short`)."""
    return f"{'nothing' if short == NO_EVIDENCE else 'too little'} in the batch measures the people ({short})"


def relative_agreement(people: RatingArrays, series: list[np.ndarray]) -> dict[str, float]:
    """Per person, their agreement with the models' consensus (the mean rank of the informative models' answers
    per item) over all the people's, shrunk toward 1 with thresholds.RELATIVE_PSEUDO items: who rates better than whom,
    which the models measure even where nothing measures the people's absolute reliability."""
    ranks = [np.where(np.isnan(s), np.nan, rankdata(np.nan_to_num(s)) / len(s)) for s in series]
    consensus = np.nanmean(np.vstack(ranks), axis=0) if ranks else np.zeros(0)
    overall, _ = agreement(item_means(people.item, people.rating, len(consensus)), consensus)
    if overall <= 0:
        return {}
    names, code = np.unique(people.worker.astype(str), return_inverse=True)
    theirs = np.nan_to_num(grouped_spearman(code, people.rating, consensus[people.item], len(names)))
    n = np.bincount(code, minlength=len(names))
    shrunk = np.clip(
        (n * theirs + thresholds.RELATIVE_PSEUDO * overall) / (n + thresholds.RELATIVE_PSEUDO) / overall, 0, 1.5
    )
    return {str(name): float(v) for name, v in zip(names, shrunk)}


def people_noises(found: TrustPlan, reliability: float) -> dict[str, float]:
    """Each person's noise where the people are pinned at `reliability` on average: scaled by their relative
    agreement with the models (relative_agreement; 1 for all without it)."""
    names = list(found.relative) or list(found.evidence)
    return {n: kernel.pinned_noise(float(np.clip(reliability * found.relative.get(n, 1.0), 0.02, 0.99))) for n in names}


RELIABILITY_GRID = np.linspace(0.05, 0.98, 32)  # the equal rule searches the people's mean reliability here


def equal_noise(fit_at: Callable[..., Any], found: TrustPlan, useful: list[str]) -> dict[str, float]:
    """The equal rule: the people's noises (people_noises) at which the fit gives them, on average, the
    reliability it gives the models (mean over the informative `useful` ones), found by bisection over
    RELIABILITY_GRID (the gap people - models grows with the people's reliability); `fit_at(noises)` is the rater
    model's fit with every person held at theirs. Each gap tried is kept in `found.balance`."""

    def gap(index: int) -> float:
        fit = fit_at(people_noises(found, float(RELIABILITY_GRID[index])))
        names = model_name(fit.workers)
        model = np.mean([pooled_reliability(fit, n, np.flatnonzero(names == n)) for n in useful])
        people = np.mean(fit.reliability[~np.isin(names, useful)])
        found.balance[round(float(RELIABILITY_GRID[index]), 4)] = round(float(people - model), 4)
        return float(people - model)

    low, high = 0, len(RELIABILITY_GRID) - 1
    if gap(high) <= 0:
        return people_noises(found, float(RELIABILITY_GRID[high]))
    if gap(low) >= 0:
        return people_noises(found, float(RELIABILITY_GRID[low]))
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if gap(middle) < 0 else (low, middle)
    gaps = [abs(found.balance[round(float(RELIABILITY_GRID[i]), 4)]) for i in (low, high)]
    return people_noises(found, float(RELIABILITY_GRID[low if gaps[0] < gaps[1] else high]))


def pinned_reliability(useful: list[ModelAgreement], series: dict[str, np.ndarray]) -> tuple[float, str, dict]:
    """The people's reliability where nothing measures them: the triad rule over every two informative models
    (the median over pairs), else the square root of the agreement with the one model (equal reliability)."""
    estimates, pairs = [], {}
    for i, m in enumerate(useful):
        for n in useful[i + 1 :]:
            between, _ = agreement(series[m.name], series[n.name])
            pairs[f"{m.name} ~ {n.name}"] = round(between, 4)
            if between > 0:
                estimates.append(np.sqrt(m.agreement * n.agreement / between))
    if estimates:
        return float(np.clip(np.median(estimates), 0.05, 0.99)), "triad", pairs
    return float(np.sqrt(useful[0].agreement)), "equal", pairs


def person_words(found: TrustPlan, name: str) -> str:
    """What measured a person, in words ("expert sample 12, repeats 40"), or how their reliability was assumed."""
    shown = [f"{kind} {n}" for kind, n in found.evidence.get(name, {}).items() if n]
    factor = found.relative.get(name)
    relative = "" if factor is None else f"; this person at {factor:.2f} times it by their agreement with the models"
    if found.pooled:  # a few known or repeated items each: measured pooled over the people
        own = ", ".join(shown) or "none of their own"
        at = "" if found.people_reliability is None else f" (reliability {found.people_reliability:.2f})"
        return f"{own}; the people's {POOLED_ON[found.mode]}{at}{relative}"
    if found.people_measured and shown:
        return ", ".join(shown)
    if found.people_measured:
        return f"{ASSUMED}: measured only through the other people and models"
    if found.people_reliability is None:
        return f"{ASSUMED}: {unmeasured(found.short)}"
    how = "the models' triad rule" if found.rule == "triad" else "equal to the model's, from their agreement"
    return f"{ASSUMED}: people pinned at reliability {found.people_reliability:.2f} on average ({how}){relative}"


def model_words(found: TrustPlan, name: str) -> str:
    """What measured a model, in words: its agreement with people, and whether the people were themselves
    measured; or that it carries no information."""
    seen = found.models.get(name)
    if seen is None:
        return ""
    text = f"{AGREEMENT} with people {seen.agreement:.2f} over {seen.items} items (z {seen.z:.1f})"
    if not seen.informative:
        return f"no information: {text}, below z {thresholds.INFORMATIVE_Z:g}; left out"
    if found.people_measured:
        return f"{text}; people measured by evidence"
    return f"{text}; {ASSUMED}: {person_words(found, '')[len(ASSUMED) + 2 :]}"


def summary_words(summary: dict[str, Any]) -> str:
    """The import summary's line on where the weights came from (agreement.json's model_workers)."""
    found = summary.get("trust")
    if not found:
        return ""
    if found["people_measured"]:
        by = "their repeats" if found["people_measured_by"] == REPEATS else "the items of known label"
        by += (
            f" (with {found['qualification_ratings']} answers on the qualification test)"
            if found.get("qualification_ratings") and found["people_measured_by"] == KNOWN
            else ""
        )
        text = f"weights measured from the batch's evidence: people by {by} (workers.parquet's evidence)"
    elif found["people_reliability"] is not None:
        rule = "the models' triad rule" if found["rule"] == "triad" else "equal to the model's, from their agreement"
        text = (
            f"weights assumed: {unmeasured(found.get('evidence_short') or NO_EVIDENCE)}, so "
            f"they are pinned at reliability {found['people_reliability']:.2f} ({rule}); --expert measures them"
        )
    else:
        text = f"weights assumed: {unmeasured(found.get('evidence_short') or NO_EVIDENCE)}"
    empty = [name for name, m in found["models"].items() if not m["informative"]]
    if empty:
        text += f"; no information in {', '.join(empty)} (no agreement with people beyond chance): left out"
    return text


def card_words(summary: dict[str, Any]) -> str:
    """The dataset card's sentence on how each worker was measured, from agreement.json's model_workers: the
    people counted by their kind of evidence (their ids stay out of a published card), each model by name."""
    found = summary.get("trust")
    if not found:
        return ""
    counts = {kind: n for kind, n in (found.get("people_by_evidence") or {}).items() if n}
    if not found["people_measured"]:
        short = found.get("evidence_short") or NO_EVIDENCE
        people = f"the {found.get('people', 0):,} people's reliability was assumed ({short})"
    else:
        each = ", ".join(f"{kind} {n:,}" for kind, n in counts.items())
        people = f"the people's reliability was measured by their evidence (people with each kind: {each})"
    models = []
    for name, m in found["models"].items():
        text = f"`{name}` by its agreement with people, {m['agreement']:.2f} over {m['items']:,} items (z {m['z']})"
        models.append(text if m["informative"] else f"{text}: no information, left out")
    return f"Weights: {people}" + (f"; {'; '.join(models)}" if models else "") + "."
