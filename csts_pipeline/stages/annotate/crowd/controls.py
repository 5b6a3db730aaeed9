"""The hidden controls of a rating batch (`annotate export --stage ratings --gold-share`), made so that nothing a
worker sees tells them from the real items (the scoring is in hidden_gold).

A real item comes with its partner (the same sentences under the pair's other condition, `-high` and `-low`),
its sentences are captions of the run's kept pairs, its id is that pair's id, and its place in hits.csv is a
seeded hash of the id. A control is made the same way: a whole pair of rows with partner ids, built on a kept
pair of the run that is not in the batch (so its sentences and ids are real captions and a real pair id, never
seen elsewhere in the batch), the one that looks most like a pair of the batch (`look_alike`), and ordered by
the same hash among the real rows. Each pair has one scored row at least, of three kinds:

- `kind`: both captions name one kind of a category (one animal, vehicle, food, place or sport, or one count of
  people: `dog` and `dog`, `bus` and `boat`, `A man` and `Two women`), under a condition asking for it (gold 5
  for the same, 1 for different);
- `unmentioned`: a condition about a category neither caption names (gold not pertinent);
- `qualification`: a `--gold` file's rate items with their own answers, only pairs that are not in the exported
  qualification test, which the workers have seen, and never the package's default gold set, which anyone can
  read.

The second row of a pair takes any condition the batch writes, drawn as often as the batch writes it: it is
scored when the condition is about a category neither caption names (not pertinent), else it only fills the
pair out (no answer; never an item). So the controls' conditions come out in the batch's own proportions, not
only those the word lists (`resources/control_words.json`) can score. A paraphrase of one caption, the obvious
identical-meaning control, is not used: its two sentences share far more words than any kept pair's (the filter
keeps pairs with few shared words), which a worker can see at a glance."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.schemas import PROVENANCE
from csts_pipeline.stages.annotate.crowd import gold_set
from csts_pipeline.stages.annotate.crowd.files import read_jsonl
from csts_pipeline.stages.annotate.crowd.hidden_gold import UNMENTIONED
from csts_pipeline.stages.annotate.crowd.kept import KeptSource
from csts_pipeline.stages.annotate.labels.sampling import hash64, unique_pairs
from csts_pipeline.stages.annotate.layout import CONDITION_TYPES, QUALIFICATION_TASKS, TASKS, rating_item_id

SAME, DIFFERENT = "5", "1"  # a `kind` control's answer: both sentences name the same kind, or two different

WORDS_FILE = "control_words.json"  # package data: the word lists, versioned


def _lists() -> dict[str, Any]:
    text = (resources.files("csts_pipeline.stages.annotate") / "resources" / WORDS_FILE).read_text(encoding="utf-8")
    return json.loads(text)


_LISTS = _lists()
# per category: the nouns that name it in a condition, the kinds a `kind` control compares (one per sentence, the
# same kind: 5, different kinds: 1) and other words that show a sentence mentions the category (which keep it
# from a `kind` row and from a not-pertinent condition about it)
CATEGORIES = {
    name: (tuple(c["nouns"]), tuple(c["kinds"]), tuple(c["others"])) for name, c in _LISTS["categories"].items()
}
FALLBACK = {name: c["fallback"] for name, c in _LISTS["categories"].items()}
KIND_WORDS, COUNTING = set(_LISTS["kind_words"]), set(_LISTS["counting"])  # counting: of nothing, all agree
PLAIN = set(_LISTS["plain"])  # words a condition asking only for the kind may hold beside a category noun
EVERYWHERE = set(_LISTS["everywhere"])  # every scene has one: never a not-pertinent condition
KIND_OF: dict[str, str] = _LISTS["kind_of"]  # words that name a sport's kind by its player or gear
COUNT = _LISTS["counting_people"]  # `The number of people.`: one counted phrase of people in each caption
_WORD = re.compile(r"[a-z]+")


def words(text: str) -> list[str]:
    """Lower-case words, `hot dog` read as one word (a food, not an animal), plurals as their singular."""
    found = _WORD.findall(text.casefold().replace("hot dogs", "hotdog").replace("hot dog", "hotdog"))
    return [w[:-1] if w.endswith("s") and w[:-1] in _SINGULAR else w for w in found]


_SINGULAR = {w for nouns, kinds, others in CATEGORIES.values() for w in (*kinds, *others)}


def kinds_in(text: str, category: str) -> tuple[set[str], bool]:
    """The category's kinds a sentence names, and whether it names the category at all."""
    _, kinds, others = CATEGORIES[category]
    found = {KIND_OF.get(w, w) for w in words(text)}
    return found & set(kinds), bool(found & set(kinds)) or bool(found & set(others))


def people_count(sentence: str) -> int | None:
    """How many people a caption names when it names them once, with a number (`A man`, `two women`, one word
    between allowed); None when it names none, several groups, or no number (`men`, `a group of people`)."""
    tokens = _WORD.findall(sentence.casefold())
    people = set(COUNT["one"]) | set(COUNT["many"])
    others = set(CATEGORIES["people"][2]) - people - set(COUNT["ignored"])
    at = [i for i, t in enumerate(tokens) if t in people]
    if len(at) != 1 or others & set(tokens):
        return None
    before = [t for t in tokens[max(0, at[0] - 2) : at[0]] if t in COUNT["numbers"]]
    if not before:
        return None
    number = COUNT["numbers"][before[-1]]
    return number if (number == 1) == (tokens[at[0]] in COUNT["one"]) else None


def counts_people(condition: str) -> bool:
    """Whether a condition asks only how many people there are (`The number of people.`)."""
    found = set(_WORD.findall(condition.casefold()))
    return found <= set(COUNT["condition"]) and bool(found & {"number", "many"}) and bool(found & set(COUNT["many"]))


def condition_category(condition: str) -> tuple[str | None, bool]:
    """The category a condition is about (its first category noun or kind), and whether it asks for the kind
    alone (`The type of animal.`), so that one kind against another answers it."""
    found = set(words(condition))
    for category, (nouns, kinds, _) in CATEGORIES.items():
        if found & set(nouns) or found & set(kinds):
            plain = found <= PLAIN | KIND_WORDS | set(nouns) and bool(found & set(nouns))
            return category, plain
    return None, False


class Conditions:
    """The batch's own written conditions, from which every control row takes its condition, each drawn as often
    as the batch writes it among those that fit the row, with fallbacks for a category the batch never writes
    about. A pair's second row takes any of them (scored where it is not pertinent, else only filling the pair
    out), so the controls' conditions follow the batch's, not only those the word lists can score."""

    def __init__(self, real: list[dict[str, Any]]) -> None:
        self.freq = Counter(t["condition"] for t in real if t.get("condition"))
        self.total = max(sum(self.freq.values()), 1)
        self.about: dict[str, list[str]] = {c: [] for c in CATEGORIES}  # not pertinent where the category is absent
        self.kind: dict[str, list[str]] = {c: [] for c in CATEGORIES}  # asking for the kind alone
        self.count = sorted(c for c in self.freq if counts_people(c))
        for condition in sorted(self.freq):
            category, plain = condition_category(condition)
            if category is not None and not set(words(condition)) & COUNTING:  # none of anything: a count of 0
                self.about[category].append(condition)
                if plain:
                    self.kind[category].append(condition)

    def share(self, condition: str) -> float:
        """How often the batch writes `condition` (a fallback it never writes: as if half a row)."""
        return self.freq.get(condition, 0.5) / self.total

    def draw(self, options: list[str], rng: np.random.Generator) -> str:
        """One of `options`, as often as the batch writes it."""
        weights = np.array([self.share(c) for c in options])
        return options[int(rng.choice(len(options), p=weights / weights.sum()))]

    def unmentioned(self, text: str) -> list[str]:
        """The conditions about a category `text` does not name: not pertinent for it."""
        free = [c for c in CATEGORIES if c not in EVERYWHERE and not kinds_in(text, c)[1]]
        found = [x for c in free for x in (self.about[c] or [FALLBACK[c]])]
        if not found:  # then conditions about things captions rarely name (hidden_gold)
            lowered = text.casefold()
            found = [c for c, keys in UNMENTIONED if not any(k in lowered for k in keys)]
        return found

    def absent(self, text: str, rng: np.random.Generator) -> str | None:
        """A not-pertinent condition for `text`, or None."""
        found = self.unmentioned(text)
        return self.draw(found, rng) if found else None

    def partner(self, text: str, taken: str, rng: np.random.Generator) -> tuple[str, str | None]:
        """The condition of a control pair's second row, drawn from all the batch's conditions, and its answer:
        not pertinent where it is about a category `text` does not name, else None (the row fills the pair out
        and is not scored)."""
        options = [c for c in self.freq if c != taken] or [c for c in FALLBACK.values() if c != taken]
        condition = self.draw(options, rng)
        return condition, gold_set.NOT_PERTINENT if condition in self.unmentioned(text) else None

    def kind_of(self, category: str, rng: np.random.Generator) -> str:
        found = self.count if category == "count" else self.kind[category]
        return self.draw(found, rng) if found else FALLBACK[category]

    def kind_share(self, category: str) -> float:
        found = self.count if category == "count" else self.kind[category]
        return sum(self.share(c) for c in found) or self.share(FALLBACK[category])


def fresh_pairs(source: KeptSource, batch: list[dict[str, Any]], seed: int, most: int) -> list[dict[str, Any]]:
    """At most `most` of the run's kept pairs that are not in the batch (by their unordered caption ids), drawn
    uniformly (seeded); `look_alike` then picks among them those most like the batch's pairs."""
    numeric, offsets = source.read(("pair_id", "caption_id_1", "caption_id_2"))
    rows = unique_pairs(numeric)
    first = numeric.column("caption_id_1").to_numpy()[rows].astype(np.int64)
    second = numeric.column("caption_id_2").to_numpy()[rows].astype(np.int64)
    unordered = (np.minimum(first, second) << 32) | np.maximum(first, second)
    ids = np.array([(t["caption_id_1"], t["caption_id_2"]) for t in batch], np.int64).reshape(-1, 2)
    rows = rows[~np.isin(unordered, (ids.min(axis=1) << 32) | ids.max(axis=1))]
    rows = rows[np.argsort(hash64(rows.astype(np.int64), seed + 2), kind="stable")]
    return source.take(offsets, rows[:most]).to_pylist()


def qualification_pairs(annotate_dir: Path, gold: Path | None) -> list[list[dict[str, Any]]]:
    """The `gold` file's rate items grouped by sentence pair (at most two a pair), leaving out the pairs of the
    exported qualification test and of the package's default gold set."""
    if gold is None:
        return []
    seen = {(i["sentence1"], i["sentence2"]) for i in gold_set.read_gold(gold_set.default_gold())}
    test = annotate_dir / QUALIFICATION_TASKS / TASKS
    if test.is_file():
        seen |= {(i["sentence1"], i["sentence2"]) for t in read_jsonl(test) for i in t["items"]}
    pairs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for item in gold_set.read_gold(gold):
        key = (item["sentence1"], item["sentence2"])
        if item["kind"] == "rate" and key not in seen:
            pairs.setdefault(key, []).append(item)
    return [items[:2] for items in pairs.values()]


def _rows(kind: str, kept: dict, qual: list, conditions: Conditions, rng: np.random.Generator) -> list | None:
    """The (sentence1, sentence2, condition, gold answer) of a control pair's two rows (the second one's answer
    None when it only fills the pair out), or None when `kept` does not fit the kind."""
    if kind == "qualification":
        items = qual.pop(0)
        rows = [(i["sentence1"], i["sentence2"], i["condition"], i["gold_rating"]) for i in items]
        if len(rows) == 1:
            rows.append((*rows[0][:2], *conditions.partner(f"{rows[0][0]} {rows[0][1]}", rows[0][2], rng)))
        return rows
    first, second = kept["sentence1"], kept["sentence2"]
    if kind == "kind":
        row = _kind_row(first, second, conditions, rng)
    else:
        condition = conditions.absent(f"{first} {second}", rng)
        row = None if condition is None else (first, second, condition, gold_set.NOT_PERTINENT)
    if row is None:
        return None
    return [row, (first, second, *conditions.partner(f"{first} {second}", row[2], rng))]


def _kind_row(first: str, second: str, conditions: Conditions, rng: np.random.Generator) -> tuple | None:
    """One kind (or one count of people) in each caption, under a condition asking for it: 5 the same, 1 not;
    of the categories that fit, one drawn as often as the batch writes its conditions; None when none fits."""
    fits = []
    for category in ["count", *(c for c, (_, kinds, _) in CATEGORIES.items() if kinds)]:
        if category == "count":
            a, b = people_count(first), people_count(second)
            if a is not None and b is not None and conditions.count:
                fits.append((category, a == b))
            continue
        a, b = kinds_in(first, category)[0], kinds_in(second, category)[0]
        if len(a) == 1 and len(b) == 1 and not {w for w in words(f"{first} {second}") if w in CATEGORIES[category][2]}:
            fits.append((category, a == b))
    if not fits:
        return None
    weights = np.array([conditions.kind_share(category) for category, _ in fits])
    category, same = fits[int(rng.choice(len(fits), p=weights / weights.sum()))]
    return first, second, conditions.kind_of(category, rng), SAME if same else DIFFERENT


def require_source(source: KeptSource | None, share: float) -> None:
    """Controls need kept pairs outside the batch: a UserError saying where to find them when none are given."""
    if share > 0 and source is None:
        raise UserError(
            "--gold-share: controls are made from kept pairs outside the batch; give --dataset/--manifest "
            "(reads <work_dir>/filter/kept/) or --input PATH"
        )


def make(
    source: KeptSource,
    annotate_dir: Path,
    real: list[dict[str, Any]],
    gold: Path | None,
    n: int,
    seed: int,
) -> list[dict[str, Any]]:
    """About `n` control rows (a whole number of pairs, at least one pair when `n` > 0), each pair on a kept
    pair of the run outside the batch, the most like the batch's pairs: up to a third from the gold file, a
    third of the rest `kind`, the rest
    `unmentioned` (more of those when too few kept pairs fit `kind`)."""
    wanted = max(1, round(n / 2)) if n > 0 else 0
    if not wanted:
        return []
    rng = np.random.default_rng(seed)
    qual, conditions = qualification_pairs(annotate_dir, gold), Conditions(real)
    quota = {"qualification": min(len(qual), wanted // 3)}
    quota["kind"] = (wanted - quota["qualification"]) // 2
    quota["unmentioned"] = wanted - quota["qualification"] - quota["kind"]
    made: list[dict[str, Any]] = []
    spare: list[dict[str, Any]] = []
    for kept in look_alike(fresh_pairs(source, real, seed, 20 * wanted + 1000), real, rng):
        if not _add(made, kept, quota=quota, qual=qual, conditions=conditions, rng=rng):
            spare.append(kept)
        if not any(quota.values()):
            return made
    quota = {"unmentioned": sum(quota.values())}  # too few kept pairs fit the other kinds
    for kept in spare:
        _add(made, kept, quota=quota, qual=qual, conditions=conditions, rng=rng)
        if not any(quota.values()):
            return made
    raise UserError(
        f"{source.name}: --gold-share needs {wanted} kept pairs outside the batch to make controls from, "
        f"found {len(made) // 2}; lower --gold-share"
    )


def _looks(pair: dict[str, Any], captions: np.ndarray) -> tuple[float, ...]:
    """What a worker sees of a pair: the two sentences' lengths in words, the share of words they share, and
    where its two caption ids fall among the batch's (`captions`, sorted), as shares."""
    first, second = set(words(pair["sentence1"])), set(words(pair["sentence2"]))
    places = np.searchsorted(captions, [pair["caption_id_1"], pair["caption_id_2"]]) / max(1, len(captions))
    lengths = len(pair["sentence1"].split()), len(pair["sentence2"].split())
    return *lengths, len(first & second) / max(1, len(first | second)), *places


def look_alike(candidates: list[dict], real: list[dict], rng: np.random.Generator) -> Iterator[dict]:
    """The candidates in an order that follows the batch: for each of the batch's pairs in turn (a seeded order,
    again and again), the unused candidate that looks most like it (`_looks`, each measure in units of its
    spread over the batch), so that the controls follow this batch's own mix of short, long and alike pairs and
    of caption ids, not the whole kept set's."""
    pairs = list({t["pair_id"]: t for t in real}.values())
    if not candidates or not pairs:
        yield from candidates
        return
    captions = np.sort([c for t in pairs for c in (t["caption_id_1"], t["caption_id_2"])])
    templates = np.array([_looks(t, captions) for t in pairs], np.float64)
    found = np.array([_looks(c, captions) for c in candidates], np.float64)
    scale = templates.std(axis=0) + 1e-9
    free = np.ones(len(candidates), bool)
    while free.any():
        for template in rng.permutation(len(templates)):
            distance = (np.abs(found - templates[template]) / scale).sum(axis=1)
            best = int(np.argmin(np.where(free, distance, np.inf)))
            free[best] = False
            yield candidates[best]
            if not free.any():
                return


def _add(made: list, kept: dict, *, quota: dict[str, int], qual: list, conditions: Conditions, rng) -> bool:
    """The first kind with quota left that `kept` fits, as a control pair added to `made`; False when none."""
    for kind in ("qualification", "kind", "unmentioned"):
        rows = _rows(kind, kept, qual, conditions, rng) if quota.get(kind) else None
        if rows is not None:
            quota[kind] -= 1
            for (s1, s2, condition, answer), which in zip(rows, rng.permutation(len(CONDITION_TYPES))):
                made.append(
                    _task(kept, CONDITION_TYPES[which], s1=s1, s2=s2, condition=condition, answer=answer, kind=kind)
                )
            return True
    return False


def _task(kept: dict, condition_type: str, *, s1: str, s2: str, condition: str, answer: str | None, kind: str) -> dict:
    return {
        "item_id": rating_item_id(kept["pair_id"], condition_type),
        **{name: kept[name] for name in PROVENANCE},
        "sentence1": s1,
        "sentence2": s2,
        "condition": condition,
        "condition_type": None,
        "writer_id": None,
        "control": True,  # answered or not: never an item (hidden_gold.is_control)
        "gold_answer": answer,
        "gold_source": kind,
    }


def mix(real: list[dict[str, Any]], gold: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """Real and control rows in one order, the real rows' own: a seeded hash of each row's pair id and type, so
    a control's place says nothing about it (and a pair's two rows fall apart as a real pair's do)."""
    tasks = real + gold
    pair = np.array([t["pair_id"] for t in tasks], np.int64)
    low = np.array([t["item_id"].endswith("-low") for t in tasks])
    key = hash64(pair * 2 + low, seed)
    return [tasks[i] for i in np.argsort(key, kind="stable")]
