"""The ratings import's evidence beyond the results files (issue 61): the qualification folder's answers checked
against its record before they measure anyone; a qualification re-import, and a model that rates after the
import, make the import stale for split, export --more and publish; a model folder without its record refused.
Every refusal is one line, exit status 2, with the previous outputs byte-identical."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from csts_pipeline.stages.annotate.layout import MODEL_RATINGS, model_dir
from csts_pipeline.testing.chosen_model import rate_with
from csts_pipeline.testing.command_path import People, first_batch
from csts_pipeline.testing.simulate_models import kernel
from tests.annotate.test_annotate import cli, cli_error
from tests.annotate.test_bad_inputs_annotate import snapshot
from tests.annotate.test_expert_sample import copy_built
from tests.annotate.test_trust import folder_with, take_qualification

IMPORT = ("annotate", "import", "--stage", "ratings", "--aggregate", "model")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A batch rated by a good model and one person an item, the people through the qualification test, and an
    import and a split on all of it."""
    base = tmp_path_factory.mktemp("stale")
    folder, truth = folder_with(base, "good")
    people = People.around(truth, seed=0, spam=0.0, lenient=0.0, harsh=0.0)
    first_batch(folder, people, 1, base / "people.csv", 0)
    (base / "truth.json").write_text(json.dumps(truth))
    take_qualification(folder, list(people.kind), 0, base)
    cli(*IMPORT, "--out", folder, "--results", base / "people.csv")
    cli("annotate", "split", "--out", folder)
    return folder


@pytest.fixture
def folder(built: Path, tmp_path: Path) -> Path:
    return copy_built(built, tmp_path)


def refused(folder: Path, *args: str | Path) -> str:
    """The one line a refused command prints, the annotate folder left byte-identical."""
    before = snapshot(folder)
    line = cli_error(*args)
    assert snapshot(folder) == before
    return line


def import_again(folder: Path) -> tuple[str | Path, ...]:
    return (*IMPORT, "--out", folder, "--results", folder.parent / "people.csv", "--force")


@pytest.mark.parametrize("damage", ["header", "half", "deleted"])
def test_damaged_qualification_answers_are_refused_in_one_line(folder: Path, damage: str):
    answers = folder / "qualification" / "answers.csv"
    text = answers.read_text()
    if damage == "deleted":
        answers.unlink()
    else:
        answers.write_text(text.splitlines()[0] + "\n" if damage == "header" else text[: len(text) // 2])
    line = refused(folder, *import_again(folder))
    problem = "missing" if damage == "deleted" else "bytes, the record says"
    assert line.startswith(f"error: {answers}: ") and problem in line, line
    assert "rebuild them with `csts-pipeline annotate import --stage qualification --results FILE --force`" in line


def test_a_qualification_reimport_makes_the_ratings_import_stale(folder: Path, tmp_path: Path):
    assert "up to date" in cli("annotate", "split", "--out", folder)
    with (folder / "qualification" / "workers.csv").open(newline="") as handle:
        people = [row["worker_id"] for row in csv.DictReader(handle)]
    take_qualification(folder, people, 1, tmp_path)  # other answers: another qualification output
    stale = refused(folder, "annotate", "split", "--out", folder, "--force")
    assert stale == (
        f"error: {folder / 'ratings'}: stale: the qualification output it was computed from has changed since; "
        "rerun `csts-pipeline annotate import --stage ratings --results FILE` first"
    )
    assert "stale" in refused(folder, "export", "--format", "hf", "--annotate", folder, "--out", tmp_path / "hub")
    cli(*import_again(folder))
    cli("annotate", "split", "--out", folder, "--force")


def test_a_model_folder_without_its_record_is_refused(folder: Path):
    (run,) = [p for p in (folder / MODEL_RATINGS).iterdir() if p.is_dir()]
    (run / "_stage.json").unlink()
    line = refused(folder, *import_again(folder))
    assert line.startswith(f"error: {run}: a model's answers without their record (_stage.json)"), line


def test_a_model_new_since_the_import_makes_it_stale_unless_the_import_named_its_models(folder: Path, tmp_path: Path):
    ids = list(json.loads((folder.parent / "truth.json").read_text()))
    rate_with(folder, "second", {i: (kernel(np.array([3.0]), 1.0)[0], 0.05) for i in ids})
    new = model_dir(folder, "model:second").name
    for args in (
        ("annotate", "split", "--out", folder, "--force"),
        ("annotate", "export", "--stage", "ratings", "--more", "--out", folder),
        ("export", "--format", "hf", "--annotate", folder, "--out", tmp_path / "hub"),
    ):
        assert refused(folder, *args) == (
            f"error: {folder / 'ratings'}: stale: the {new} output is new since it was computed (it weighs every "
            "model there); rerun `csts-pipeline annotate import --stage ratings --results FILE` first"
        )
    cli(*import_again(folder), "--models", "good")  # named: a model it did not name leaves it current
    cli("annotate", "split", "--out", folder, "--force")
    cli(*import_again(folder))  # every model: the new one weighed
    cli("annotate", "split", "--out", folder, "--force")
