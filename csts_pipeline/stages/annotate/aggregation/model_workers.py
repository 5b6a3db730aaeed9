"""Models among the raters (`annotate rate`, workers `model:<name>`): what their answers are allowed to do to the
labels and the not-pertinent verdict: the rater model's side of models in the loop.

A model answers every item, and its mistakes repeat: one kind of condition it gets wrong, one answer it favours.
So, unlike a person, it is fitted once per kind of condition (the audit's kinds: colour, number, place, ...;
audit_stats.condition_kind), each kind with its own confusion table, shrunk toward the model's table over all its
kinds (model_tables.free_tables), so a kind with little evidence says what the model says overall. Which models enter
at all is the batch's evidence's decision (aggregation/trust.py): a model whose answers agree with the people no
better than chance is left out whole and changes no label. A kind where its mean error is KIND_ERROR_AT points or
more (doubtful) sends its items to people at `export --more` (steps/followup.py). Its not-pertinent votes enter
only as far as they agree with the people's verdict and the gold (weigh_flags); a model whose flag skill is below
thresholds.FLAG_SKILL_BELOW changes no verdict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from csts_pipeline.stages.annotate.aggregation import thresholds
from csts_pipeline.stages.annotate.aggregation.em import em_answers, kernel, ordinal, score_density
from csts_pipeline.stages.annotate.labels.agreement import RatingArrays, is_model_worker
from csts_pipeline.stages.annotate.labels.audit_stats import condition_kind


class TrustPlan(Protocol):
    """What model_fits and dropped_rows read of trust.TrustPlan (a Protocol: trust.py imports this module)."""

    models: dict[str, Any]

    @property
    def left_out(self) -> list[str]: ...


KIND_SEP = em_answers.FAMILY_SEP  # a model worker fitted on one kind of condition: "model:<name> @ colour"
FAIR_VOTER = np.array([[0.8, 0.2], [0.2, 0.8]])  # pseudo-votes of a fair voter, [true verdict, vote]


def condition_kinds(conditions: list[str]) -> np.ndarray:
    """Per condition, its kind (audit_stats.CONDITION_KINDS, else "other")."""
    return np.array([condition_kind(c) for c in conditions], dtype=object).astype(str)


def by_kind(ratings: RatingArrays, kinds: np.ndarray | None) -> RatingArrays:
    """The ratings with each model row's worker named after its item's kind (`kinds` per item)."""
    if kinds is None or ratings.human.all():
        return ratings
    model = ~ratings.human
    worker = ratings.worker.astype(object)
    worker[model] = np.char.add(np.char.add(ratings.worker[model].astype(str), KIND_SEP), kinds[ratings.item[model]])
    return RatingArrays(ratings.item, worker.astype(str), ratings.rating, ratings.flagged,
                        distribution=ratings.distribution, p_flag=ratings.p_flag, score=ratings.score)  # fmt: skip


def model_name(worker: np.ndarray) -> np.ndarray:
    """The model behind each (possibly per-kind) worker id; people's ids unchanged."""
    return _parts(worker)[0]


def _parts(worker: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each worker id split at KIND_SEP: the model (the whole id where it has none) and the kind ("" where none),
    the ids with a KIND_SEP found in one vectorised pass and only those split in Python."""
    names = np.asarray(worker).astype(str).reshape(-1)
    split = np.flatnonzero(np.char.find(names, KIND_SEP) >= 0)
    if len(split) == 0:
        return names, np.full(len(names), "", dtype=str)
    parts = [name.partition(KIND_SEP) for name in names[split].tolist()]
    owner, kind = names.astype(object), np.full(len(names), "", dtype=object)
    owner[split], kind[split] = [p[0] for p in parts], [p[2] for p in parts]
    return np.array(owner.tolist(), dtype=str), np.array(kind.tolist(), dtype=str)


@dataclass
class KindFit:
    """One model on one kind of condition: its answers there, its reliability, its mean error (expected answer
    minus the item's label, in points) and whether it was left out (`weak`)."""

    kind: str
    answers: int
    reliability: float
    error: float | None
    weak: bool

    def row(self) -> dict[str, Any]:
        error = None if self.error is None else round(self.error, 4)
        return {"kind": self.kind, "answers": self.answers, "reliability": round(self.reliability, 4),
                "error": error, "weak": self.weak}  # fmt: skip


@dataclass
class ModelFit:
    """A model worker as a whole: reliability of its answers pooled over its kinds (each kind's confusion
    weighed by its answers), flag skill, per-kind fits, and whether its answers were left out entirely."""

    reliability: float
    bias: float
    noise: float
    kinds: list[KindFit]
    left_out: bool
    flag_skill: float | None = None

    @property
    def unreliable(self) -> bool:
        return self.left_out or (self.flag_skill is not None and self.flag_skill < thresholds.FLAG_SKILL_BELOW)

    @property
    def weak_kinds(self) -> list[str]:
        return [k.kind for k in self.kinds if k.weak]


def predictive_reliability(table: np.ndarray, prior: np.ndarray | None = None) -> np.ndarray:
    """The correlation ratio of the true label on the answer under P(y | t) [..., t, y], t uniform on 1..5: how
    well the answer predicts the truth, sqrt(var E[t | y] / var t). A language model's reliability: the plain
    correlation of t and y (kernel.reliability) divides by the spread of the answers, so a model that says 5
    for every item but for a trace of pseudo-answers came out at 0.6; here it is near 0. For a person's kernel
    the two are close. `prior`: t drawn from the batch's labels (uniform when None), as kernel.reliability."""
    p_t = np.full(table.shape[-2], 1 / table.shape[-2]) if prior is None else np.asarray(prior, np.float64)
    joint = table * p_t[:, None]
    p_y = joint.sum(axis=-2)
    mean_t = (joint * ordinal.SCALE[:, None]).sum(axis=-2) / np.maximum(p_y, 1e-300)  # E[t | y]
    overall = p_t @ ordinal.SCALE
    spread = (p_y * (mean_t - overall) ** 2).sum(axis=-1)
    return np.sqrt(spread / (p_t @ ordinal.SCALE**2 - overall**2))


def pooled_reliability(fit: ordinal.OrdinalFit, name: str, members: np.ndarray) -> float:
    """A model's reliability over all its kinds on this batch: its whole score's (score_density) where it gave
    scores, else its kinds' tables weighed by their answers."""
    if name in fit.density:
        return score_density.reliability(fit.density[name], fit.prior)
    table = fit.table if fit.table is not None else kernel.response(fit.bias, fit.noise)
    weights = fit.answers[members] / max(fit.answers[members].sum(), 1)
    return float(predictive_reliability(np.einsum("k,kty->ty", weights, table[members]), fit.prior))


def model_fits(fit: ordinal.OrdinalFit, split: RatingArrays, plan: TrustPlan) -> dict[str, ModelFit]:
    """Every model of the batch: for those in the fit (by_kind), its kinds' reliability and error and its pooled
    reliability; for those the plan left out (no agreement with people beyond chance), reliability 0 and
    `left_out`."""
    table = fit.table if fit.table is not None else kernel.response(fit.bias, fit.noise)
    virtual = np.flatnonzero(is_model_worker(fit.workers))
    found: dict[str, ModelFit] = {}
    rated = split.subset(split.rated & ~split.human)
    expected = em_answers.answer_matrix(rated.rating, rated.distribution) @ ordinal.SCALE
    error_of = expected - fit.label[rated.item]
    for name in np.unique(model_name(fit.workers[virtual])):
        mine = virtual[model_name(fit.workers[virtual]) == name]
        weights = fit.answers[mine] / max(fit.answers[mine].sum(), 1)
        pooled = pooled_reliability(fit, str(name), mine)
        kinds: list[KindFit] = []
        for at in mine:
            rows = rated.worker == fit.workers[at]
            error = float(error_of[rows].mean()) if rows.any() else None
            reliability = float(predictive_reliability(table[at], fit.prior))
            kind_name = str(fit.workers[at]).partition(KIND_SEP)[2] or "all"
            kinds.append(KindFit(kind_name, int(fit.answers[at]), reliability, error, False))
        seen = plan.models.get(str(name))
        if seen is not None:
            kinds += [KindFit(kind, seen.kinds[kind][1], 0.0, None, True) for kind in seen.dropped]
        found[str(name)] = ModelFit(pooled, float(weights @ fit.bias[mine]), float(weights @ fit.noise[mine]),
                                    sorted(kinds, key=lambda k: -k.answers), False)  # fmt: skip
    for name, seen in plan.models.items():
        if name not in found:
            found[name] = ModelFit(
                0.0, 0.0, float(kernel.NOISE_GRID[-1]), [KindFit("all", seen.items, 0.0, None, True)], True
            )
    return found


def dropped_rows(split: RatingArrays, plan: TrustPlan) -> np.ndarray:
    """Per row of `split` (by_kind): a model's answer the plan leaves out (trust.py: the model carries no
    information, or answers this kind of condition without it)."""
    names = split.worker.astype(str)
    owner, kind = _parts(names)
    out = np.isin(owner, plan.left_out)
    for name, seen in plan.models.items():
        out |= (owner == name) & np.isin(kind, seen.dropped)
    return out


def weigh_flags(
    p_people: np.ndarray, models: RatingArrays, gold: tuple[RatingArrays, np.ndarray] | None = None
) -> tuple[np.ndarray, dict[str, float]]:
    """P(not pertinent) per item after the models' votes, and each model's flag skill. The people's verdict
    (`p_people`, nan for items no person answered) is the reference: a model's 2 x 2 confusion is counted from its
    most likely votes against it and against the gold (`gold`: the models' rows on controls, and per control 1
    when it is not pertinent, 0 when it has a numeric answer), with the pseudo-votes of a fair voter, and
    its soft vote q enters as the expected likelihood q P(flag | z) + (1 - q) P(ok | z). Why not fitted jointly:
    a model that flags everything confirms itself (all items flagged, its confusion perfect), and where people
    never flag the people's own confusion has nothing to hold it. Skill is the balanced accuracy; below
    thresholds.FLAG_SKILL_BELOW a model's votes are left out."""
    log_odds = np.log(np.clip(p_people, 1e-12, 1 - 1e-12) / np.clip(1 - p_people, 1e-12, 1))
    skills: dict[str, float] = {}
    for name in np.unique(models.worker.astype(str)):
        mine = models.subset(models.worker.astype(str) == name)
        q = np.nan_to_num(_p_flag(mine), nan=0.5)
        p_vote, z = q, np.nan_to_num(p_people[mine.item], nan=0.5)
        if gold is not None:
            on = gold[0].worker.astype(str) == name
            p_vote = np.concatenate([p_vote, np.nan_to_num(_p_flag(gold[0])[on], nan=0.5)])
            z = np.concatenate([z, gold[1][gold[0].item[on]].astype(np.float64)])
        vote = (p_vote > 0.5).astype(np.float64)
        counts = FAIR_VOTER + np.array([[z @ vote, z @ (1 - vote)], [(1 - z) @ vote, (1 - z) @ (1 - vote)]])
        confusion = counts / counts.sum(axis=1, keepdims=True)  # [z (flag, ok), vote (flag, ok)]
        skills[name] = float((confusion[0, 0] + confusion[1, 1]) / 2)
        if skills[name] < thresholds.FLAG_SKILL_BELOW:
            continue
        like = np.stack([q * confusion[z_, 0] + (1 - q) * confusion[z_, 1] for z_ in (0, 1)], axis=1)
        log_odds += np.bincount(mine.item, weights=np.log(like[:, 0] / like[:, 1]), minlength=len(p_people))
    p_flag = np.where(np.isnan(p_people), np.nan, 1 / (1 + np.exp(-log_odds)))
    return p_flag, skills


def doubtful(kind: dict[str, Any]) -> bool:
    """A kind of condition (a KindFit row) whose items a model's answers cannot settle: weak, or its mean error
    there thresholds.KIND_ERROR_AT points or more either way."""
    return bool(kind["weak"]) or (kind["error"] is not None and abs(kind["error"]) >= thresholds.KIND_ERROR_AT)


def _p_flag(rows: RatingArrays) -> np.ndarray:
    """Each row's P(not pertinent): a model's own, or its hard flag."""
    return rows.flagged.astype(np.float64) if rows.p_flag is None else rows.p_flag


def describe(m: dict[str, Any]) -> str:
    """One model of model_share in words, for the import's summary, the report page and the dataset card: its kind
    and how its answers were read (where the import knew them), its answers, reliability, flag skill and gold, its
    weak kinds of condition, and what it replaced."""
    kind = f"{m['model_kind']}, {m['model_reading']}; " if m.get("model_kind") else ""
    parts = [f"{kind}{m['answers']:,} answers, reliability {m['reliability']:.3f}"]
    if m.get("flag_skill") is not None:
        parts.append(f"flag skill {m['flag_skill']:.3f}")
    if m.get("gold_answers"):
        parts.append(f"gold {m['gold_accuracy']:.3f} right of {m['gold_answers']}")
    text = ", ".join(parts)
    if m.get("left_out"):
        return (
            f"{text}; no information (no agreement with people beyond chance): its answers were left out, "
            "it replaced no ratings"
        )
    weak = [k for k in m.get("kinds", []) if k["weak"]]
    if weak:
        each = "; ".join(
            f"{k['kind']}: reliability {k['reliability']:.2f}, mean error {_signed(k['error'])} on {k['answers']}"
            for k in weak
        )
        text += f"; weak on {', '.join(k['kind'] for k in weak)} ({each}): its answers there were left out"
    off = [k for k in m.get("kinds", []) if doubtful(k) and not k["weak"]]
    if off:
        each = "; ".join(f"{k['kind']}: mean error {_signed(k['error'])} on {k['answers']}" for k in off)
        text += f"; errs on {', '.join(k['kind'] for k in off)} ({each})"
    if weak or off:
        text += f": --more asks people there up to {thresholds.KIND_MIN_RATINGS} ratings an item"
    if m.get("unreliable"):
        text += f"; unreliable flags (skill below {thresholds.FLAG_SKILL_BELOW}): its not-pertinent votes were left out"
    return f"{text}; worth {as_count(m['replaced_ratings'])} human ratings"


def as_count(value: float | None) -> str:
    """Human ratings replaced, as a whole number: the figure counts ratings, and "0.0" read as a measurement."""
    return "-" if value is None else f"{round(value):,}"


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"
