"""The qualification stage without a browser: the gold file's checks, the scoring rule, the requester's manual
verdict kept by the next import, and later imports leaving out unqualified workers' rows as `not_qualified`."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from csts_pipeline.cli import app
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.stages.annotate.crowd import gold_set
from csts_pipeline.stages.annotate.steps import qualification
from csts_pipeline.stages.annotate.steps.qualification import condition_problems, read_gold
from tests.conftest import REPO

EXAMPLE = REPO / "docs" / "examples" / "annotate"
GOLD = ["5", "1", "5", "1", "np", "4"]  # the default gold set's rate items, in order
runner = CliRunner()


def cli(*args: str | Path, code: int = 0) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result.output


def answer_row(worker: str, ratings: list[str], conditions: list[tuple[str, str]], test_id: str) -> dict[str, str]:
    row = {"test_id": test_id, "worker_id": worker, "assignment_id": f"A-{worker}"}
    for n, (high, low) in enumerate(conditions, start=1):
        row |= {f"condition_high_{n}": high, f"condition_low_{n}": low}
    for n, answer in enumerate(ratings, start=1):
        row |= {f"not_pertinent_{n}": "true"} if answer == "np" else {f"rating_{n}": answer}
    return row


def write_plain(path: Path, rows: list[dict]) -> Path:
    names = list(dict.fromkeys(name for row in rows for name in row))
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, names)
        writer.writeheader()
        writer.writerows(rows)
    return path


def read_workers(folder: Path) -> dict[str, dict[str, str]]:
    with (folder / "qualification" / "workers.csv").open(newline="") as handle:
        return {row["worker_id"]: row for row in csv.DictReader(handle)}


GOOD = [("The place.", "The time of day."), ("The colour of the vehicle.", "The weather.")]


@pytest.fixture
def tested(tmp_path: Path) -> Path:
    """An annotate folder whose qualification import scored four workers: W01 and W02 pass (W02 flags a pertinent
    item), W03 rates far from gold, W04 writes a condition that mentions the sentence."""
    folder = tmp_path / "annotate"
    cli("annotate", "export", "--stage", "qualification", "--out", folder)
    (test,) = [json.loads(line) for line in (folder / "qualification_tasks" / "tasks.jsonl").read_text().splitlines()]
    rows = [
        answer_row("W01", GOLD, GOOD, test["test_id"]),
        answer_row("W02", ["np", "1", "5", "2", "np", "4"], GOOD, test["test_id"]),
        answer_row("W03", ["3"] * 6, GOOD, test["test_id"]),
        answer_row("W04", GOLD, [GOOD[0], ("What the sentence is about.", "The weather.")], test["test_id"]),
        {**answer_row("W01", ["1"] * 6, GOOD, test["test_id"]), "assignment_id": "A-W01-2"},  # the first try counts
    ]
    cli(
        "annotate",
        "import",
        "--stage",
        "qualification",
        "--results",
        write_plain(tmp_path / "q.csv", rows),
        "--out",
        folder,
    )
    return folder


def test_the_import_scores_by_gold_ratings_and_condition_checks(tested: Path):
    workers = read_workers(tested)
    assert {w: (row["rating_error"], row["conditions_passed"], row["qualified"]) for w, row in workers.items()} == {
        "W01": ("0", "2", "true"),
        "W02": ("0.833", "2", "true"),  # a flag where gold rates (4), |2-1|
        "W03": ("2.167", "2", "false"),  # |3-5|, |3-1|, |3-5|, |3-1|, a rating where gold is not pertinent (4), |3-4|
        "W04": ("0", "1", "false"),
    }
    with (tested / "qualification" / "answers.csv").open(newline="") as handle:
        problems = {(r["worker_id"], r["item_id"]): r["problems"] for r in csv.DictReader(handle)}
    assert problems["W04", "q-w2"] == "mentions_sentence_high" and problems["W01", "q-w1"] == ""
    with (tested / "qualification" / "report.csv").open(newline="") as handle:
        assert [(r["row"], r["problem"]) for r in csv.DictReader(handle)] == [("6", "duplicate_worker")]
    grant = (tested / "qualification" / "mturk_workers.csv").read_text().splitlines()
    assert grant == ['"Worker ID","UPDATE-C-STS annotator"', '"W01",1', '"W02",1', '"W03",0', '"W04",0']


def test_a_manual_verdict_is_kept_and_decides(tested: Path, tmp_path: Path):
    path = tested / "qualification" / "workers.csv"
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        row["manual_verdict"] = {"W04": "pass", "W01": "fail"}.get(row["worker_id"], "")
    write_plain(path, rows)
    # the later imports read the verdict at once ...
    assert qualification.qualified_workers(tested, None).workers == {"W02", "W04"}
    # ... and the next qualification import keeps it
    results = sorted(tmp_path.glob("q.csv"))
    output = cli("annotate", "import", "--stage", "qualification", "--results", *results, "--out", tested)
    assert "2 qualified" in output and "2 manual verdicts" in output
    workers = read_workers(tested)
    assert (workers["W04"]["auto_qualified"], workers["W04"]["manual_verdict"], workers["W04"]["qualified"]) == (
        "false",
        "pass",
        "true",
    )
    assert workers["W01"]["qualified"] == "false"
    rows[0]["manual_verdict"] = "maybe"
    write_plain(path, rows)
    assert "manual_verdict 'maybe' is not pass, fail or empty" in cli(
        "annotate", "import", "--stage", "qualification", "--results", *results, "--out", tested, code=2
    )


def test_later_imports_leave_out_unqualified_workers(tested: Path, tmp_path: Path):
    """W01-W04 wrote the worked example's conditions; W03 and W04 did not qualify."""
    cli("annotate", "export", "--stage", "conditions", "--input", EXAMPLE / "kept.csv", "--n", 8, "--out", tested)
    output = cli(
        "annotate", "import", "--stage", "conditions", "--results", EXAMPLE / "conditions_results.csv", "--out", tested
    )
    with (tested / "conditions" / "report.csv").open(newline="") as handle:
        report = list(csv.DictReader(handle))
    left_out = {r["row"] for r in report if r["problem"] == "not_qualified"}
    with (EXAMPLE / "conditions_results.csv").open(newline="") as handle:
        unqualified = {str(n) for n, r in enumerate(csv.DictReader(handle), start=2) if r["WorkerId"] in {"W03", "W04"}}
    assert left_out == unqualified and left_out and f"not_qualified {len(left_out)}" in output
    writers = set(pq.read_table(tested / "conditions" / "conditions.parquet").column("worker_id").to_pylist())
    assert writers <= {"W01", "W02"}
    assert "worker W03 is not qualified in" in next(r["detail"] for r in report if r["problem"] == "not_qualified")

    # --workers names another list: here everyone the example has
    everyone = write_plain(
        tmp_path / "everyone.csv", [{"worker_id": f"W0{n}", "qualified": "true"} for n in range(1, 5)]
    )
    args = ["annotate", "import", "--stage", "conditions", "--results", EXAMPLE / "conditions_results.csv"]
    output = cli(*args, "--out", tested, "--workers", everyone)
    assert "not_qualified" not in output and "8 of 8 tasks answered" in output
    assert "workers file not found" in cli(*args, "--out", tested, "--workers", tmp_path / "nope.csv", code=2)
    assert "not for --stage qualification" in cli(
        "annotate", "import", "--stage", "qualification", "--results", EXAMPLE / "conditions_results.csv",
        "--workers", everyone, "--out", tested, code=2,
    )  # fmt: skip


def test_ratings_and_bws_imports_apply_the_workers_file(tmp_path: Path):
    folder = tmp_path / "annotate"
    cli("annotate", "export", "--stage", "conditions", "--input", EXAMPLE / "kept.csv", "--n", 8, "--out", folder)
    cli("annotate", "import", "--stage", "conditions", "--results", EXAMPLE / "conditions_results.csv", "--out", folder)
    cli("annotate", "export", "--stage", "ratings", "--out", folder)
    cli("annotate", "export", "--stage", "bws", "--out", folder)
    workers = write_plain(
        tmp_path / "w.csv",
        [{"worker_id": w, "qualified": str(w in {"R01", "R02", "B01"})} for w in ("R01", "R02", "R03", "B01", "B02")],
    )
    cli(
        "annotate",
        "import",
        "--stage",
        "ratings",
        "--results",
        EXAMPLE / "ratings_results.csv",
        "--workers",
        workers,
        "--out",
        folder,
    )
    raters = set(pq.read_table(folder / "ratings" / "ratings.parquet").column("worker_id").to_pylist())
    assert raters == {"R01", "R02"}  # R03 failed, R04 is not listed
    cli(
        "annotate",
        "import",
        "--stage",
        "bws",
        "--results",
        EXAMPLE / "bws_results.csv",
        "--workers",
        workers,
        "--out",
        folder,
    )
    assert set(pq.read_table(folder / "bws" / "annotations.parquet").column("worker_id").to_pylist()) == {"B01"}
    with (folder / "bws" / "report.csv").open(newline="") as handle:
        assert any(r["problem"] == "not_qualified" and "B02" in r["detail"] for r in csv.DictReader(handle))


def test_condition_checks_match_the_page():
    s1, s2 = "A red tram crosses a bridge.", "A red kite over a beach."
    assert condition_problems("The colour.", "The setting.", s1, s2) == []
    assert condition_problems("", " ", s1, s2) == ["empty_condition_high", "empty_condition_low"]
    assert condition_problems("The sentence's topic.", "x" * 81, s1, s2) == ["mentions_sentence_high", "too_long_low"]
    assert condition_problems("a red  tram crosses a bridge.", "The colour", s1, s2) == ["copies_sentence_high"]
    assert condition_problems("The Colour.", "the colour.", s1, s2) == ["same_conditions"]
    assert condition_problems("The weather", " the  weather. ", s1, s2) == ["same_conditions"]  # as the page
    assert condition_problems("The colour-of the car!", "the colour of the car", s1, s2) == ["same_conditions"]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("q-x,draw,a,b,,,", "row 2: kind 'draw' is not write or rate"),
        ("q-x,rate,a,b,The colour.,6,", "row 2: gold_rating '6' is not 1-5 or not_pertinent"),
        ("q-x,rate,a,b,,3,", "row 2: a rate item needs a condition"),
        ("q-r1,rate,a,b,c,3,", "row 5: item_id 'q-r1' is empty or repeated"),
    ],
)
def test_a_bad_gold_file_is_refused_with_its_row(tmp_path: Path, row: str, message: str):
    default = gold_set.default_gold().read_text().splitlines()
    path = tmp_path / "gold.csv"
    path.write_text("\n".join([default[0], row, *default[1:]]) + "\n")
    with pytest.raises(UserError, match=message):
        read_gold(path)
    path.write_text("\n".join(line for line in default if ",rate," not in line) + "\n")
    with pytest.raises(UserError, match="no rate item"):
        read_gold(path)
    path.write_text("item_id,kind\n")
    assert "missing column(s) sentence1" in cli(
        "annotate", "export", "--stage", "qualification", "--gold", path, "--out", tmp_path / "a", code=2
    )


def test_the_threshold_and_the_qualification_name_are_options(tested: Path, tmp_path: Path):
    args = ["annotate", "import", "--stage", "qualification", "--results", tmp_path / "q.csv", "--out", tested]
    output = cli(*args, "--max-rating-error", "2.5", "--qualification-name", "Careful rater")
    assert "3 qualified (mean rating error at most 2.5" in output  # W03, 2.167 from gold, now passes
    grant = (tested / "qualification" / "mturk_workers.csv").read_text().splitlines()
    assert grant[0] == '"Worker ID","UPDATE-Careful rater"' and '"W03",1' in grant
    assert "--max-rating-error must be in [0, 4]" in cli(*args, "--max-rating-error", "5", code=2)
    assert "without commas" in cli(*args, "--qualification-name", "a,b", code=2)
    assert "--gold: only for --stage qualification or ratings" in cli(
        "annotate", "export", "--stage", "conditions", "--gold", tmp_path / "q.csv", "--out", tested, code=2
    )


def test_another_gold_file_replaces_an_exported_test_only_with_force(tested: Path, tmp_path: Path):
    gold = tmp_path / "gold.csv"
    gold.write_text(gold_set.default_gold().read_text().replace("The colour of the clothing.", "The colour."))
    args = ["annotate", "export", "--stage", "qualification", "--gold", gold, "--out", tested]
    assert "--force replaces them" in cli(*args, code=2)
    assert f"from {gold}" in cli(*args, "--force")
    hits = (tested / "qualification_tasks" / "hits.csv").read_text()
    assert '"The colour."' in hits and "clothing" not in hits
