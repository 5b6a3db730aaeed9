"""The guideline examples (stages/annotate/templates/guide_examples.json) against their own rules and against the
other texts that show conditions: every good condition is readable from both example sentences, no bad one is
offered anywhere as a placeholder, a gold condition or a good example, and the pages and Label Studio configs
show exactly the file's examples."""

from __future__ import annotations

import copy
import re
from xml.etree import ElementTree

import pytest

from csts_pipeline.stages.annotate.crowd import gold_set, guide, label_studio, pages
from csts_pipeline.stages.annotate.crowd.results import condition_key

STOP = {"the", "a", "an", "of", "is", "are", "how", "what", "which", "in", "on", "at", "to"}
# words that name an aspect of a scene, or a role any scene has, rather than a thing only some scenes hold
ASPECT = {"colour", "color", "place", "weather", "busy", "way", "moves", "kind", "type", "number", "size", "time",
          "day", "mood", "setting", "main", "object", "person", "people"}  # fmt: skip


def good_conditions(found: dict) -> list[tuple[str, list[str], str, str]]:
    """Every condition the examples offer as right: (condition, answers, sentence 1, sentence 2)."""
    conditions, ratings, bws = found["conditions"], found["ratings"], found["bws"]
    pair = (conditions["sentence1"], conditions["sentence2"])
    good = [(c["condition"], c["answers"], *pair) for c in (conditions["alike"], conditions["different"])]
    good += [(r["good"]["condition"], r["good"]["answers"], *pair) for r in conditions["rules"]]
    for section in (ratings, bws):
        good += [
            (e["condition"], e["answers"], section["sentence1"], section["sentence2"])
            for e in section["examples"]
            if e.get("answer") != "not pertinent"
        ]
    return good


def unreadable(condition: str, answers: list[str], sentence1: str, sentence2: str) -> list[str]:
    """Why a good condition cannot be read from both sentences: an answer missing from its sentence, or a thing
    named that one sentence lacks."""
    problems = [
        f"answer {answer!r} not in {sentence!r}"
        for answer, sentence in zip(answers, (sentence1, sentence2), strict=True)
        if answer.casefold() not in sentence.casefold()
    ]
    for word in re.findall(r"\w+", condition.casefold()):
        missing = [s for s in (sentence1, sentence2) if not re.search(rf"\b{word}", s.casefold())]
        if word not in STOP | ASPECT and missing:
            problems.append(f"{condition!r} names {word!r}, absent from {missing[0]!r}")
    return problems


def contradictions(found: dict) -> list[str]:
    """Every way the examples contradict their own rules or the other texts."""
    problems = [p for good in good_conditions(found) for p in unreadable(*good)]
    bad = {condition_key(rule["bad"]): rule["bad"] for rule in found["conditions"]["rules"]}
    items = gold_set.read_gold(gold_set.default_gold())
    offered = {"placeholder": list(found["placeholders"].values())}
    offered["gold condition"] = [item["condition"] for item in items if item["kind"] == "rate"]
    offered["good example"] = [good[0] for good in good_conditions(found)]
    for where, conditions in offered.items():
        problems += [
            f"bad example {bad[condition_key(c)]!r} used as a {where}" for c in conditions if condition_key(c) in bad
        ]
    return problems


def test_the_examples_keep_their_own_rules():
    assert contradictions(guide.examples()) == []


@pytest.mark.parametrize(
    ("change", "caught"),
    [
        (lambda f: f["conditions"]["rules"][0]["good"].update(condition="The colour of the tram."), "names 'tram'"),
        (lambda f: f["conditions"]["rules"][1]["good"].update(answers=["heavy rain", "sunny"]), "not in"),
        (lambda f: f["conditions"]["rules"][4].update(bad="The number of people."), "used as a gold condition"),
        (lambda f: f["placeholders"].update(condition_high="the situation"), "used as a placeholder"),
        (lambda f: f["conditions"]["rules"][2].update(bad="The Weather!"), "used as a good example"),
    ],
)
def test_a_contradiction_put_back_is_caught(change, caught: str):
    """The old guide's mistakes, put back one at a time, each fail the check."""
    found = copy.deepcopy(guide.examples())
    change(found)
    assert any(caught in problem for problem in contradictions(found)), contradictions(found)


def test_the_pages_and_configs_show_the_files_examples():
    found = guide.examples()
    page = pages.render("conditions")
    config = ElementTree.fromstring(label_studio.config_text("conditions"))
    shown = config.find("Collapse/Panel/HyperText").attrib["value"]
    for rule in found["conditions"]["rules"]:
        for text in (rule["good"]["condition"], rule["bad"], rule["rule"]):
            assert text in page and text in shown, text
    placeholders = {node.attrib["name"]: node.attrib.get("placeholder") for node in config.iter("TextArea")}
    assert placeholders == found["placeholders"]
    assert "e.g." not in page.split('<dialog class="guide"')[0]  # no hint priming one answer on every HIT
    for example in found["ratings"]["examples"]:
        assert example["why"] in pages.render("ratings")
    bws = pages.render("bws")
    assert all(example["verdict"] in bws for example in found["bws"]["examples"])
    assert "least similar</i>, so do not pick" in bws  # not pertinent is not dissimilar
