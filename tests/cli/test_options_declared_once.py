"""Each annotate option's default is declared once, in its step's options (stages/annotate/steps/options.py, and
pipeline/model_spec.py for the options that choose a language model): the command line takes it from there and
typer shows it as `[default: X]`, so no help text spells a default by hand where it could drift from the one the
step uses."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import click
import pytest
import typer

from csts_pipeline.cli import app
from csts_pipeline.cli.annotate import EXPORT_OPTIONS
from csts_pipeline.cli.annotate_import import IMPORT_OPTIONS
from csts_pipeline.pipeline.model_spec import ModelSpec
from csts_pipeline.stages.annotate.steps.options import (
    ConditionCheckOptions,
    CrossfitOptions,
    DraftOptions,
    SplitOptions,
)

# each annotate command and the options objects its options fill
OPTIONS_OF: dict[str, list[type]] = {
    "export": list(EXPORT_OPTIONS.values()),
    "import": list(IMPORT_OPTIONS.values()),
    "split": [SplitOptions],
    "crossfit": [CrossfitOptions],
    "rate": [ModelSpec],
    "draft": [ModelSpec, DraftOptions],
    "check-conditions": [ModelSpec, ConditionCheckOptions],
}
FIELD_OF = {"lr": "learning_rate"}  # crossfit's --lr fills CrossfitOptions.learning_rate
# "default 1.0", "default: 4", "(default 'C-STS annotator')", "; default mean.": a default written by hand
HAND_WRITTEN = re.compile(r"\bdefault:?\s+(?:['\"\d]|\w+\.?\s*$)")


def annotate_command(name: str) -> click.Command:
    group = typer.main.get_command(app)
    annotate = group.commands["annotate"]  # type: ignore[attr-defined]
    return annotate.commands[name]


def declared_defaults(options: list[type], name: str) -> list[Any]:
    """The defaults the options objects declare for the field `name` (one per object that has it)."""
    return [
        field.default
        for kind in options
        for field in dataclasses.fields(kind)
        if field.name == name and field.default is not dataclasses.MISSING
    ]


@pytest.mark.parametrize("command", sorted(OPTIONS_OF))
def test_each_option_default_is_the_one_its_step_declares(command: str):
    checked = []
    for param in annotate_command(command).params:
        for default in declared_defaults(OPTIONS_OF[command], FIELD_OF.get(param.name or "", param.name or "")):
            assert param.default == default, f"annotate {command} {param.opts[0]}: {param.default!r} != {default!r}"
            checked.append(param.name)
    assert len(checked) >= 2, checked


@pytest.mark.parametrize("command", ["export", "import", "split", "audit", "rate", "draft", "check-conditions"])
def test_no_help_writes_a_default_by_hand(command: str):
    for param in annotate_command(command).params:
        words = " ".join((getattr(param, "help", None) or "").split())
        assert not HAND_WRITTEN.search(words), f"annotate {command} {param.opts[0]}: {words!r}"
        if param.default not in (None, False, ()):
            assert f"default {param.default}" not in words and f"default: {param.default}" not in words
