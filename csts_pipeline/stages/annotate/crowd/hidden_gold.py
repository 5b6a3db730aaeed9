"""Hidden gold in live rating batches: control items with a known answer
mixed into the HITs at `annotate export --stage ratings --gold-share`, and at the import a per-worker sequential test
on them that decides who is blocked.

Controls are made in stages/annotate/crowd/controls.py, so that no column, id, row order, partner structure or
sentence tells them from the real items; which rows are controls is kept in tasks.jsonl (`gold_answer`) and
`gold.csv` of the export folder, never in hits.csv.

The rule (Wald's sequential probability ratio test, per worker, over their gold answers in results order): an
answer is right when it is within TOLERANCE points of a numeric gold answer (and not flagged), or flags a
not-pertinent control. H0: the worker is honest, P(right) = P_HONEST; H1: the worker answers at random,
P(right) = P_RANDOM. The log-likelihood ratio of H1 to H0 is added up answer by answer; the worker is blocked
when it reaches log((1 - BETA) / ALPHA) and cleared when it falls to log(BETA / (1 - ALPHA)); a worker whose
answers run out in between is not blocked. ALPHA bounds the share of honest workers blocked, BETA the share of
random ones cleared."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.schemas import GOLD_SCHEMA
from csts_pipeline.stages.annotate.crowd import gold_set
from csts_pipeline.stages.annotate.crowd.files import write_csv
from csts_pipeline.stages.annotate.crowd.results import parse_rating
from csts_pipeline.stages.annotate.crowd.screening import Rating

GOLD_FILE = "gold.csv"  # ratings_tasks/: the control rows and their answers (private: never uploaded)
MAX_SHARE = 0.5
TOLERANCE = 1  # a numeric gold answer is matched within this many points
P_HONEST = 0.8  # H0: an honest worker's P(right) on gold
P_RANDOM = 0.4  # H1: a worker answering at random (uniform 1-5 is within a point of 5 or of 1 two times in five)
ALPHA = 0.05  # P(block | honest)
BETA = 0.05  # P(clear | random)
BLOCK_AT = math.log((1 - BETA) / ALPHA)
CLEAR_AT = math.log(BETA / (1 - ALPHA))
STEP_RIGHT = math.log(P_RANDOM / P_HONEST)
STEP_WRONG = math.log((1 - P_RANDOM) / (1 - P_HONEST))
RULE = {
    "test": "sprt",
    "h0_p_right": P_HONEST,
    "h1_p_right": P_RANDOM,
    "alpha": ALPHA,
    "beta": BETA,
    "tolerance": TOLERANCE,
    "block_at": round(BLOCK_AT, 4),
    "clear_at": round(CLEAR_AT, 4),
}
# conditions about things caption sentences rarely mention, each with the words that would make it pertinent
UNMENTIONED = (
    ("The kind of musical instrument being played.", ("music", "instrument", "guitar", "piano", "violin", "drum")),
    ("The flavour of the ice cream.", ("ice", "cream", "flavo", "dessert")),
    ("The programming language on the screen.", ("program", "code", "screen", "computer", "laptop", "language")),
    ("The price of the shoes.", ("price", "shoe", "cost", "dollar")),
    ("The breed of the cat.", ("cat", "kitten", "breed")),
    ("The number of pages in the book.", ("book", "page", "read")),
)


def is_gold(task: dict[str, Any]) -> bool:
    """A control with an answer to score."""
    return task.get("gold_answer") is not None


def is_control(task: dict[str, Any]) -> bool:
    """Any row of a control pair, scored or only filling the pair out: never an item, a label or a split row."""
    return bool(task.get("control")) or is_gold(task)


def gold_count(n_real: int, share: float) -> int:
    """Controls to add so that they are `share` of all rows."""
    return round(share * n_real / (1 - share))


def check_share(share: float) -> None:
    if not 0 <= share < MAX_SHARE:
        raise UserError(f"--gold-share must be in [0, {MAX_SHARE}) (got {share})")


def write_gold_file(tasks: list[dict[str, Any]], path: Path) -> None:
    """`gold.csv`: the control rows of the batch (`tasks`: all of them) with their answers (empty for a row that
    only fills a pair out) and where they came from."""
    rows = [
        {"item_id": t["item_id"], "gold_answer": t["gold_answer"], "source": t["gold_source"]}
        for t in tasks
        if is_control(t)
    ]
    write_csv(pa.Table.from_pylist(rows, schema=GOLD_SCHEMA), path)


def right(answer: str, rating: Rating) -> bool:
    """A gold answer matched: the flag for a not-pertinent control, else a rating within TOLERANCE points."""
    if answer == gold_set.NOT_PERTINENT:
        return rating.not_pertinent
    gold = parse_rating(answer)
    return rating.rating is not None and gold is not None and abs(rating.rating - gold) <= TOLERANCE


@dataclass
class WorkerGold:
    """One worker's gold answers, how many were right, the test's statistic and its decision."""

    answers: int = 0
    right: int = 0
    llr: float = 0.0
    decision: str = "undecided"  # blocked, cleared or undecided
    decided_after: int | None = None

    def add(self, ok: bool) -> None:
        self.answers += 1
        self.right += ok
        if self.decision != "undecided":
            return
        self.llr += STEP_RIGHT if ok else STEP_WRONG
        if self.llr >= BLOCK_AT:
            self.decision, self.decided_after = "blocked", self.answers
        elif self.llr <= CLEAR_AT:
            self.decision, self.decided_after = "cleared", self.answers

    @property
    def accuracy(self) -> float | None:
        return self.right / self.answers if self.answers else None


@dataclass
class GoldCheck:
    """Every worker's gold record, from the accepted ratings in results order."""

    workers: dict[str, WorkerGold] = field(default_factory=dict)

    @classmethod
    def of(cls, tasks: list[dict[str, Any]], accepted: list[Rating]) -> GoldCheck:
        check = cls()
        for rating in accepted:
            answer = tasks[rating.item].get("gold_answer")
            if answer is not None:
                check.workers.setdefault(rating.worker, WorkerGold()).add(right(answer, rating))
        return check

    @property
    def blocked(self) -> frozenset[str]:
        return frozenset(w for w, g in self.workers.items() if g.decision == "blocked")

    def blocklist(self) -> list[tuple[str, str]]:
        """The blocked workers and why, for each platform's block list (crowd/platform.py)."""
        return [
            (w, f"{g.answers - g.right} of {g.answers} control answers wrong (decided after {g.decided_after})")
            for w, g in sorted(self.workers.items())
            if g.decision == "blocked"
        ]

    def summary(self) -> dict[str, Any]:
        answers = sum(g.answers for g in self.workers.values())
        decisions = [g.decision for g in self.workers.values()]
        return {
            "rule": RULE,
            "workers": len(self.workers),
            "answers": answers,
            "accuracy": round(sum(g.right for g in self.workers.values()) / answers, 4) if answers else None,
            **{name: decisions.count(name) for name in ("blocked", "cleared", "undecided")},
        }


@dataclass
class Separated:
    """The real items and their accepted ratings (reindexed to them); the ratings of gold items with a numeric
    answer (indexed 0.. over those items) with the answers, to anchor the ordinal model; and the ratings of every
    scored control (indexed 0.. over them) with 1 where its answer is not pertinent, 0 where it is numeric, which
    score a language model's flags (model_workers.weigh_flags)."""

    items: list[dict[str, Any]]
    accepted: list[Rating]
    anchor: list[Rating]
    anchor_truth: np.ndarray
    anchor_conditions: list[str] = field(default_factory=list)
    controls: list[Rating] = field(default_factory=list)
    controls_flag: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def separate(tasks: list[dict[str, Any]], accepted: list[Rating]) -> Separated:
    """Split the tasks and ratings into the real ones (which go on to labels, splits and exports) and gold. Each
    task is asked once whether it is gold or a control (a batch without controls is passed through as it is)."""
    gold = [is_gold(t) for t in tasks]
    control = [g or bool(t.get("control")) for g, t in zip(gold, tasks)]
    if not any(control):
        empty = np.zeros(0, np.int64)
        return Separated(items=list(tasks), accepted=list(accepted), anchor=[], anchor_truth=empty)
    real_at = {i: n for n, i in enumerate(i for i, c in enumerate(control) if not c)}
    scored = [i for i, g in enumerate(gold) if g]
    numeric = [i for i in scored if parse_rating(tasks[i]["gold_answer"]) is not None]
    anchor_at = {i: n for n, i in enumerate(numeric)}
    real = _reindexed(accepted, real_at)
    anchor = _reindexed(accepted, anchor_at)
    truth = np.array([parse_rating(tasks[i]["gold_answer"]) for i in numeric], np.int64)
    conditions = [str(tasks[i].get("condition", "")) for i in numeric]
    scored_at = {i: n for n, i in enumerate(scored)}
    controls = _reindexed(accepted, scored_at)
    flag = np.array([tasks[i]["gold_answer"] == gold_set.NOT_PERTINENT for i in scored], np.int64)
    items = [t for t, c in zip(tasks, control) if not c]
    return Separated(items=items, accepted=real, anchor=anchor, anchor_truth=truth, anchor_conditions=conditions,
                     controls=controls, controls_flag=flag)  # fmt: skip


def _reindexed(accepted: list[Rating], at: dict[int, int]) -> list[Rating]:
    """The ratings of the items in `at`, each with its item's new index (a tuple built directly: _replace was
    12 s of a 600,000-rating import under load)."""
    if not at:
        return []
    return [Rating(at[r.item], *r[1:]) for r in accepted if r.item in at]
