"""One crowd platform behind one small interface (`CrowdPlatform`): what annotate asks of
a place where people answer tasks. It writes a stage's tasks and page beside the platform-neutral `hits.csv` and
`tasks.jsonl`, reads back a results file as `ResultRow`s, and writes the files that grant qualified workers or
block failed ones.

A platform is a module of this package that defines `PLATFORM` (mturk.py, label_studio.py): adding one is that
module and its test. Every export writes each platform's files for the stage (one record, whatever platform the
user reads them with); `annotate export --platform` names the one whose files the command points to, and an
import reads each results file with the platform that `reads` it."""

from __future__ import annotations

import pkgutil
from functools import cache
from importlib import import_module
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.annotate.crowd.results import Problem, ResultRow

Read = tuple[list[ResultRow], list[Problem], set[str]]  # rows, rows left out, the field names the file has
DEFAULT = "mturk"  # listed first; it reads any CSV or JSONL, so it is asked last which results file is its own


class Platform(Protocol):
    """What annotate needs of a crowd platform."""

    name: str  # the `--platform` value
    results: str  # the results files it reads, for error messages ("Label Studio JSON export (.json)")

    def supports(self, stage: str) -> bool:
        """Whether it can show `stage`'s tasks (a page or config for it exists)."""
        ...

    def write_tasks(self, folder: Path, stage: str, hits: pa.Table, repeats: dict[str, int] | None) -> dict[str, str]:
        """Its task files and page for `stage` in the export's staging `folder` (beside hits.csv): record key ->
        path relative to `folder`; nothing when it does not support the stage."""
        ...

    def where(self, folder: Path, stage: str) -> str:
        """One line naming the files of `stage` the user hands to the platform, under the tasks `folder`."""
        ...

    def reads(self, path: Path) -> bool:
        """Whether `path` is one of its results files."""
        ...

    def read_results(self, path: Path, required: tuple[str, ...]) -> Read:
        """The rows of one of its results files (`required`: the fields the import needs, the id first); a file
        of the wrong shape is a UserError naming it."""
        ...

    def grant(self, folder: Path, workers: list[tuple[str, bool]], name: str) -> dict[str, str]:
        """Files that give the qualification `name` to the passing `workers` (worker, passed): key -> name."""
        ...

    def block(self, folder: Path, blocked: list[tuple[str, str]]) -> dict[str, str]:
        """Files that block `blocked` workers (worker, reason) from the platform's tasks: key -> name."""
        ...


@cache
def platforms() -> dict[str, Platform]:
    """Every platform, by name: the `PLATFORM` of each module of this package that defines one."""
    package = import_module(__package__ or "")
    found: dict[str, Platform] = {}
    for module in pkgutil.iter_modules(package.__path__):
        value = getattr(import_module(f"{package.__name__}.{module.name}"), "PLATFORM", None)
        if value is not None:
            found[value.name] = value
    return dict(sorted(found.items(), key=lambda item: (item[0] != DEFAULT, item[0])))


def platform(name: str, stage: str | None = None) -> Platform:
    """The platform `--platform name` names, refusing in one line a name no module defines or a `stage` it cannot
    show."""
    found = platforms()
    if name not in found:
        raise UserError(f"--platform {name!r}: expected {' or '.join(found)}")
    if stage is not None and not found[name].supports(stage):
        raise UserError(f"--platform {name}: no {name} tasks for --stage {stage}")
    return found[name]


def reader_of(path: Path) -> Platform:
    """The platform whose results file `path` is: the default one last, as the catch-all for CSV and JSONL."""
    for candidate in sorted(platforms().values(), key=lambda p: p.name == DEFAULT):
        if candidate.reads(path):
            return candidate
    known = "; ".join(f"{p.name}: {p.results}" for p in platforms().values())
    raise UserError(f"{path}: not a results file of any crowd platform ({known})")


def write_tasks(folder: Path, stage: str, hits: pa.Table, repeats: dict[str, int] | None) -> dict[str, str]:
    """Every platform's task files for `stage` (those that support it)."""
    written: dict[str, str] = {}
    for each in platforms().values():
        written |= each.write_tasks(folder, stage, hits, repeats)
    return written


def grant(folder: Path, workers: list[tuple[str, bool]], name: str) -> dict[str, str]:
    """Every platform's grant files."""
    written: dict[str, str] = {}
    for each in platforms().values():
        written |= each.grant(folder, workers, name)
    return written


def block(folder: Path, blocked: list[tuple[str, str]]) -> dict[str, str]:
    """Every platform's block files."""
    written: dict[str, str] = {}
    for each in platforms().values():
        written |= each.block(folder, blocked)
    return written
