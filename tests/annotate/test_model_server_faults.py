"""Nothing silent with a language-model server (issue 44): against a loopback server that misbehaves on purpose
(testing.openai_server, `fake_server`), a silent server is refused within `--timeout`, every malformed
reply is a one-line error naming the URL and the first bytes, an answer is a real distribution or no answer
(recorded per answer, never a rating), the model's identity comes from what the server says, and a new
`annotate rate` makes every reader of the ratings import refuse it as stale. No model is loaded: these are fast."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from csts_pipeline.cli import app
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.failpoints import FAILPOINT
from csts_pipeline.pipeline.language_model import ModelSpec, endpoint_http, load_prompt, open_model
from csts_pipeline.pipeline.language_model.base import read_logprobs, read_option
from csts_pipeline.stages.annotate.crowd.files import read_jsonl
from csts_pipeline.stages.annotate.crowd.kept import kept_source
from csts_pipeline.stages.annotate.layout import RATINGS_TASKS, TASKS
from csts_pipeline.stages.annotate.steps import csts_split
from csts_pipeline.stages.annotate.steps.conditions import export_conditions, import_conditions
from csts_pipeline.stages.annotate.steps.model_folders import current_runs, model_answers, model_runs
from csts_pipeline.stages.annotate.steps.model_ratings import rate
from csts_pipeline.stages.annotate.steps.options import ConditionsExportOptions, RatingsImportOptions
from csts_pipeline.stages.annotate.steps.ratings import export_ratings, import_ratings
from csts_pipeline.testing.openai_server import fake_server

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "annotate"
ITEMS = 16  # the worked example's rating items
RATE = ("annotate", "rate", "--batch-size", "1")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documented example's 8 pairs through the conditions import and the ratings export (16 items)."""
    folder = tmp_path_factory.mktemp("exported") / "annotate"
    export_conditions(folder, kept_source(None, EXAMPLE / "kept.csv"), ConditionsExportOptions(n=8))
    import_conditions(folder, [EXAMPLE / "conditions_results.csv"])
    export_ratings(folder)
    return folder


@pytest.fixture
def folder(exported: Path, tmp_path: Path) -> Path:
    """A fresh copy of the exported example (its own model_ratings)."""
    return Path(shutil.copytree(exported, tmp_path / "annotate"))


def cli(*args: str | Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TQDM_DISABLE": "1"}
    env.pop(FAILPOINT, None)
    command = [sys.executable, "-m", "csts_pipeline", *map(str, args)]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=120)


def in_process(*args: str | Path) -> str:
    """A command that succeeds, run in this process (no interpreter start-up); its stdout."""
    result = CliRunner().invoke(app, [str(arg) for arg in args])
    assert result.exit_code == 0, result.output
    return result.stdout


def one_line_error(result: subprocess.CompletedProcess, *expected: str) -> str:
    """Exit 2 with one line on stderr (no traceback) holding every `expected` piece; the line."""
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(error) == 1 and "Traceback" not in result.stderr, result.stderr
    for piece in expected:
        assert piece in error[0], error[0]
    return error[0]


def rows(folder: Path) -> list[dict]:
    (run,) = model_runs(folder)
    return pq.read_table(run.folder / "ratings.parquet").to_pylist()


def record(folder: Path) -> dict:
    (run,) = model_runs(folder)
    return json.loads((run.folder / "_stage.json").read_text())


# ------------------------------------------------------------------------------------------------ bounded waiting


def test_a_server_that_never_answers_is_refused_within_the_timeout(folder: Path) -> None:
    """Case 1: the server lists its model, then never answers; `--timeout 2` ends it in one line naming the URL and
    what was waited for (the default, 60 s, is the same path)."""
    with fake_server("silent") as (url, server):
        result = cli(*RATE, "--endpoint", url, "--timeout", "2", "--out", folder)
    one_line_error(result, f"POST {url}/chat/completions", "no answer within 2 s (--timeout)", "the last: no reply")
    assert server.posts >= 1 and not model_runs(folder)


def test_the_run_deadline_and_the_progress_while_waiting(monkeypatch, caplog) -> None:
    monkeypatch.setattr(endpoint_http, "PROGRESS_S", 0.2)
    chats = [load_prompt("csts_pipeline.stages.annotate", "rate").chat(sentence1="a", sentence2="b", condition="c")]
    with fake_server("silent") as (url, _), caplog.at_level(logging.INFO, "csts_pipeline"):
        model = open_model(ModelSpec(endpoint=url, timeout=30, run_timeout=1.5))
        with pytest.raises(UserError, match=r"no answer within the run's 1.5 s \(--run-timeout\)"):
            model.option_probs(chats, ("1", "2", "3", "4", "5"))
    assert any("waiting for 1 of 1 replies" in message for message in caplog.messages), caplog.messages


@pytest.mark.parametrize(("quick", "posted", "asked_again"), [(24, 32, 8), (20, 24, 12)])
def test_a_run_deadline_keeps_every_answer_it_got(folder: Path, quick: int, posted: int, asked_again: int) -> None:
    """16 items, 2 questions each, 8 items a unit (UNIT_ITEMS), 8 requests at a time: unit 0 asks 16 questions,
    unit 1 its 8 pertinence questions (posts 17-24), then its 8 rating questions (25-32). The server answers the
    first `quick` posts at once and later ones after 5 s; `--run-timeout 2` stops the run in one line, `posted`
    questions asked. With 24, unit 1's 8 pertinence answers came back; with 20, 4 of them did (the batch stopped
    half answered). The rerun asks only the questions never answered: 32 - quick (16 when they are thrown away)."""
    with fake_server("slow_after") as (url, server):
        server.quick, server.delay = quick, 5.0
        began = time.monotonic()
        result = cli(*RATE[:2], "--endpoint", url, "--run-timeout", "2", "--out", folder)
        one_line_error(result, f"POST {url}/chat/completions", "no answer within the run's 2 s (--run-timeout)")
        assert time.monotonic() - began < 20 and server.posts == posted
        server.quick, before = 1000, server.posts
        printed = in_process("annotate", "rate", "--endpoint", url, "--out", folder)
        assert server.posts - before == asked_again == 32 - quick
    assert f"{ITEMS} of {ITEMS} items rated" in printed and f"{asked_again} asked, {32 - asked_again} from" in printed
    assert all(row["rating"] == 4 for row in rows(folder))


def test_retry_after_is_honoured(folder: Path) -> None:
    """A 503 asking for more time than the deadline leaves is refused at once (one request, no blind retry); one
    asking for 1 s is retried and the run succeeds."""
    with fake_server("retry_after") as (url, server):
        server.retry_after = 100
        result = cli(*RATE, "--endpoint", url, "--timeout", "5", "--out", folder)
        one_line_error(result, "503", "asks to wait 100 s more (Retry-After)", "no answer within 5 s")
        assert server.posts == 1
    with fake_server("retry_after") as (url, server):
        assert rate(folder, ModelSpec(endpoint=url, batch_size=1))["counts"]["answered"] == ITEMS
        assert server.posts == 2 * ITEMS + 1


# ------------------------------------------------------------------------------------- one-line errors, retried


@pytest.mark.parametrize(
    ("mode", "command", "expected"),
    [
        ("html", "rate", ("a reply that is not JSON (text/html)", "'<html><head><title>502 Bad Gateway")),
        ("no_choices", "rate", ("a reply without `choices`", '\'{"id": "r", "object": "chat.completion"')),
        ("no_choices", "draft", ("a reply without `choices`", '\'{"id": "r"')),
    ],
)
def test_a_malformed_reply_is_retried_then_one_line(folder: Path, mode: str, command: str, expected: tuple) -> None:
    """Case 2 (HTML body, JSON without `choices` in rate and draft) and case 3's first (no `choices` made 80 flat
    distributions): retried within the deadline, then one line with the URL and the reply's first bytes."""
    extra = ("--stage", "conditions") if command == "draft" else ()
    with fake_server(mode) as (url, server):
        result = cli("annotate", command, *extra, "--batch-size", "1", "--endpoint", url, "--timeout", "4", "--out",
                     folder)  # fmt: skip
    one_line_error(result, f"POST {url}/chat/completions", *expected)
    assert server.posts >= 2  # retried
    assert not model_runs(folder) and not (folder / "condition_drafts").exists()


@pytest.mark.parametrize(
    ("models", "expected"),
    [
        ({"data": None}, "a model list whose `data` is null, not a list: '{\"data\": null}'"),
        ([{"id": "fake-model"}], "a model list that is a JSON list, not an object with `data`"),
        ({"data": []}, "lists no model; name one with --model"),
    ],
)
def test_a_model_list_of_another_shape_is_one_line(folder: Path, models: object, expected: str) -> None:
    with fake_server(models=models) as (url, _):
        result = cli(*RATE, "--endpoint", url, "--out", folder)
    one_line_error(result, url, expected)


@pytest.mark.slow  # two `evaluate` processes, each importing torch
def test_the_prompting_baseline_says_the_same(tmp_path: Path) -> None:
    """`evaluate --encoding prompt --endpoint`: a silent server and a reply without `choices`, one line each."""
    from csts_pipeline.testing.train_sample import write_sample_csv

    data = write_sample_csv(tmp_path / "csts_validation.csv", 1)
    args = ("evaluate", "--encoding", "prompt", "--model", "fake-model", "--data", data, "--metrics-out",
            tmp_path / "m.json", "--timeout", "2")  # fmt: skip
    with fake_server("silent") as (url, _):
        one_line_error(cli(*args, "--endpoint", url), f"POST {url}/completions", "no answer within 2 s")
    with fake_server("no_choices") as (url, _):
        one_line_error(cli(*args, "--endpoint", url), f"POST {url}/completions", "a reply without `choices`")


# ------------------------------------------------------------------------------ a real distribution or no answer


def test_the_reading_rules() -> None:
    assert read_option("Rating: 4", "12345") == 3 and read_option(" 4.", "12345") == 3
    assert read_option("Sure! The answer", "12345") is None and read_option("3 or 4", "12345") is None
    assert read_option("Yes, it does.", ("yes", "no")) == 0 and read_option("Answer: no", ("yes", "no")) == 1
    assert read_option("Nothing", ("yes", "no")) is None  # "no" only as a whole word
    found = read_logprobs([("The", np.log(0.99)), ("4", np.log(0.01))], "12345")
    assert found.probs is None and found.missing == "low_mass" and found.option_mass == pytest.approx(0.01)
    for value in (800.0, np.inf, np.nan, 0.5):
        assert read_logprobs([("4", value), ("3", -1.0)], "12345").missing == "bad_logprobs"
    sure = read_logprobs([("4", np.log(0.6)), (" 4", np.log(0.1)), ("3", np.log(0.2))], "12345")
    assert np.allclose(sure.probs, [0, 0, 2 / 9, 7 / 9, 0]) and sure.option_mass == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("mode", "why", "read_mode"),
    [
        ("logprob_800", "bad_logprobs", "logprobs"),  # case 2: OverflowError in math.exp
        ("infinite", "bad_logprobs", "logprobs"),  # case 3: [0, 0, 0, 0, NaN] stored
        ("nan", "bad_logprobs", "logprobs"),  # case 3: fell back to sampling, recorded as logprobs
        ("no_option_logprobs", "low_mass", "logprobs"),  # case 3: flat, rating 1
        ("chatty", "few_readable", "samples"),  # case 3: "Sure! The answer", flat, rating 1
        ("ignores_n", "few_readable", "samples"),  # case 4: one sample of 10 made a sure one-hot
    ],
)
def test_no_answer_is_never_a_rating(folder: Path, mode: str, why: str, read_mode: str) -> None:
    with fake_server(mode) as (url, _):
        done = rate(folder, ModelSpec(endpoint=url))
    found = rows(folder)
    assert len(found) == ITEMS
    for row in found:
        assert row["rating"] is None and row["distribution"] is None and row["p_not_pertinent"] is None
        assert row["no_answer"] == f"pertinent:{why}; rate:{why}" and row["read_mode"] == read_mode
    assert done["counts"]["answered"] == 0 and done["counts"]["no_answer"] == ITEMS
    assert done["counts"]["no_answer_why"] == {f"pertinent:{why}": ITEMS, f"rate:{why}": ITEMS}
    if mode == "ignores_n":
        assert {(r["samples_asked"], r["samples_readable"]) for r in found} == {(10, 1)}
    tasks = read_jsonl(folder / RATINGS_TASKS / TASKS)
    assert model_answers(current_runs(folder, None), tasks).ratings == []  # the import takes no rating from them


def test_mass_off_the_options_is_recorded_and_no_answer(folder: Path) -> None:
    """Case 4: 99% on "The", 1% on digits: no answer to the rating question, its mass recorded; the yes/no
    question, answered, keeps its P(not pertinent)."""
    with fake_server("mass_on_the") as (url, _):
        rate(folder, ModelSpec(endpoint=url))
    for row in rows(folder):
        assert row["distribution"] is None and row["rating"] is None and row["no_answer"] == "rate:low_mass"
        assert row["option_mass"] == pytest.approx(0.01) and row["pertinent_option_mass"] == pytest.approx(0.95)
        assert row["p_not_pertinent"] == pytest.approx(0.25 / 0.95)


def test_a_reply_rating_4_in_words_reads_as_4(folder: Path) -> None:
    with fake_server("rating_text") as (url, _):
        printed = in_process("annotate", "rate", "--endpoint", url, "--out", folder)
    assert f"{ITEMS} of {ITEMS} items rated" in printed and "0 no answer" in printed
    for row in rows(folder):
        assert row["rating"] == 4 and row["distribution"] == [0, 0, 0, 1, 0] and row["p_not_pertinent"] == 0
        assert (row["read_mode"], row["samples_asked"], row["samples_readable"]) == ("samples", 10, 10)


def test_a_chatty_server_is_counted_in_the_summary(folder: Path) -> None:
    with fake_server("chatty") as (url, _):
        printed = in_process("annotate", "rate", "--endpoint", url, "--out", folder)
    assert f"0 of {ITEMS} items rated" in printed and f"{ITEMS} no answer (16 pertinent:few_readable" in printed
    assert record(folder)["counts"]["no_answer"] == ITEMS


def test_logprobs_dropped_mid_run_are_recorded_per_answer(folder: Path) -> None:
    """Case 4: the first reply without logprobs used to switch the whole run to sampling, and the record said one
    mode; now each answer says how it was read, and every request still asks for logprobs."""
    with fake_server("drops_logprobs") as (url, server):
        done = rate(folder, ModelSpec(endpoint=url, batch_size=1))
    assert done["counts"]["read_logprobs"] == 6 and done["counts"]["read_samples"] == 2 * ITEMS - 6
    modes = [row[name] for row in rows(folder) for name in ("pertinent_read_mode", "read_mode")]
    assert modes.count("logprobs") == 6 and done["counts"]["answered"] == ITEMS
    assert server.posts == 2 * (2 * ITEMS) - 6  # each answer after the drop: a logprob request, then samples
    with fake_server("drops_logprobs") as (url, server):
        rate(folder, ModelSpec(endpoint=url, batch_size=1, read="logprobs"), force=True)
    reasons = [why for row in rows(folder) for why in (row["no_answer"] or "").split("; ") if why]
    assert len(reasons) == 2 * ITEMS - 6 and set(reasons) == {"pertinent:no_logprobs", "rate:no_logprobs"}


def test_drafts_and_the_condition_check_take_no_answer_for_no(folder: Path, tmp_path: Path) -> None:
    """A yes/no with no answer never passes a draft nor clears a condition: the draft is dropped as no_answer, the
    condition goes to doubtful.csv for the manual verdict."""
    from csts_pipeline.stages.annotate.layout import CONDITIONS, TRIPLETS
    from csts_pipeline.stages.annotate.steps.condition_check import check_conditions
    from csts_pipeline.stages.annotate.steps.drafts import DRAFTS, DRAFTS_FILE, draft

    with fake_server("no_option_logprobs") as (url, _):
        drafted = draft(folder, ModelSpec(endpoint=url))
        checked = check_conditions(folder / CONDITIONS / TRIPLETS, tmp_path / "check", ModelSpec(endpoint=url))
    drafts = read_jsonl(folder / DRAFTS / DRAFTS_FILE)
    assert drafts and all(d["problem_high"] == "no_answer" and d["p_applies_high"] is None for d in drafts)
    assert drafted["counts"]["drafted_high"] == 0 and drafted["counts"]["rejected_high"] == {"no_answer": len(drafts)}
    doubtful = pq.read_table(tmp_path / "check" / "checked.parquet").to_pylist()
    assert doubtful and all(r["doubt"] == "no_answer" and r["p_applies"] is None for r in doubtful)
    assert checked["counts"]["no_answer"] == checked["counts"]["doubtful"] == len(doubtful)


# --------------------------------------------------------------------------------------------------- identity


def test_identity_is_what_the_server_says(folder: Path) -> None:
    """Case 4: new weights under the same name (a new `created`) and another reading mode never reuse the old
    answers; `system_fingerprint` is kept per answer and in the record."""
    with fake_server() as (url, server):
        server.created, server.fingerprint = 1_700_000_000, "fp-a"
        first = rate(folder, ModelSpec(endpoint=url))
        assert first["model"]["created"] == 1_700_000_000 and first["model"]["reading"]["mode"] == "auto"
        assert first["decoding"]["system_fingerprints"] == ["fp-a"]
        answers = pq.read_table(model_runs(folder)[0].folder / "answers.parquet").to_pylist()
        assert {a["system_fingerprint"] for a in answers} == {"fp-a"}
        asked = server.posts
        assert rate(folder, ModelSpec(endpoint=url))["status"] == "up-to-date" and server.posts == asked
        server.created = 1_700_086_400  # the same name, new weights
        again = rate(folder, ModelSpec(endpoint=url))
        assert again["counts"]["answers_computed"] == 2 * ITEMS and server.posts == asked + 2 * ITEMS
        sampled = rate(folder, ModelSpec(endpoint=url, read="samples"))
        assert sampled["counts"]["answers_computed"] == 2 * ITEMS and sampled["model"]["reading"]["mode"] == "samples"
        server.created = int(time.time())  # vLLM and llama.cpp: the time of the request
        assert "created" not in rate(folder, ModelSpec(endpoint=url, read="samples"))["model"]


def test_a_well_behaved_server_stays_clean(folder: Path) -> None:
    with fake_server() as (url, server):
        printed = in_process("annotate", "rate", "--endpoint", url, "--out", folder)
    assert f"{ITEMS} of {ITEMS} items rated" in printed and server.posts == 2 * ITEMS
    assert record(folder)["cost"]["prompts"] == 2 * ITEMS and record(folder)["cost"]["prompt_tokens"] == 50 * 2 * ITEMS
    for row in rows(folder):
        assert row["no_answer"] is None and row["rating"] == 4 and row["read_mode"] == "logprobs"
        assert row["option_mass"] == pytest.approx(0.9) and row["samples_asked"] is None


# ------------------------------------------------------------------------------------------------- staleness


def test_a_new_rate_makes_every_reader_of_the_ratings_import_refuse_it(folder: Path, tmp_path: Path) -> None:
    """Case 5: the import used model A's answers; model A rates the same folder again (read another way: new
    answers); split, export --more, publish and the report's annotation summary refuse the import in one line
    naming `annotate import --stage ratings`."""
    from csts_pipeline.report.annotations import annotation_summary
    from csts_pipeline.stages.annotate.steps.followup import export_more
    from csts_pipeline.stages.annotate.steps.publish import export_hf

    with fake_server() as (url, _):
        rate(folder, ModelSpec(endpoint=url))
    import_ratings(folder, [EXAMPLE / "ratings_results.csv"], RatingsImportOptions(aggregate="model"))
    csts_split.split(folder)
    assert annotation_summary(folder, tmp_path) is not None  # current: read
    with fake_server() as (url, _):
        rate(folder, ModelSpec(endpoint=url, read="samples"))
    stale = (
        rf"ratings: stale: the {model_runs(folder)[0].folder.name} output .* "
        r"rerun `csts-pipeline annotate import --stage ratings --results FILE`"
    )
    for step in (
        lambda: csts_split.split(folder, force=True),
        lambda: export_more(folder),
        lambda: export_hf(folder, None, tmp_path / "hub", name="x", license="cc-by-4.0"),
        lambda: annotation_summary(folder, tmp_path),
    ):
        with pytest.raises(UserError, match=stale):
            step()
