"""`annotate rate` refuses, in one line, every option the kind of model in use ignores (issue 53): a similarity
model takes --batch-size and --device; a server (--endpoint) --model, --api-key-env, --batch-size, --timeout,
--run-timeout and --read; a local language model --model, --batch-size and --device. An option given at its
default value is given all the same. The options that apply still work. `annotate draft` and `check-conditions`
ask a language model too and refuse as `rate` does, beside their own options."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from csts_pipeline.cli import app
from csts_pipeline.stages.annotate.crowd.kept import kept_source
from csts_pipeline.stages.annotate.layout import MODEL_RATINGS
from csts_pipeline.stages.annotate.steps.conditions import export_conditions, import_conditions
from csts_pipeline.stages.annotate.steps.options import ConditionsExportOptions
from csts_pipeline.stages.annotate.steps.ratings import export_ratings
from csts_pipeline.testing.openai_server import fake_server
from tests.conftest import REPO

EXAMPLE = REPO / "docs" / "examples" / "annotate"
MINILM = "packaged:all-MiniLM-L6-v2"
SIMILARITY_IGNORES = [
    ("--timeout", "0"),
    ("--timeout", "60"),  # its default, given: refused as well
    ("--run-timeout", "-1"),
    ("--run-timeout", "5"),
    ("--read", "samples"),
    ("--api-key-env", "OPENAI_API_KEY"),
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documented example's 8 pairs through the conditions import and the ratings export (16 items)."""
    folder = tmp_path_factory.mktemp("options") / "annotate"
    export_conditions(folder, kept_source(None, EXAMPLE / "kept.csv"), ConditionsExportOptions(n=8))
    import_conditions(folder, [EXAMPLE / "conditions_results.csv"])
    export_ratings(folder)
    return folder


@pytest.fixture
def folder(exported: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(exported, tmp_path / "annotate"))


def invoke(*args: str | Path) -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, ["annotate", "rate", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output.strip().splitlines()


def refused(*args: str | Path) -> str:
    """Exit 2 and one `error:` line; the line."""
    code, lines = invoke(*args)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.parametrize(("option", "value"), SIMILARITY_IGNORES)
def test_an_option_a_similarity_model_ignores_is_refused(folder: Path, option: str, value: str) -> None:
    line = refused("--similarity-model", MINILM, option, value, "--out", folder)
    assert line == (
        f"error: {option}: not for --similarity-model (a similarity model), which takes --batch-size, --device"
    )
    assert not (folder / MODEL_RATINGS).exists()


def test_every_ignored_option_is_named_at_once(folder: Path) -> None:
    line = refused("--similarity-model", MINILM, "--timeout", "0", "--run-timeout", "-1", "--read", "samples")
    assert line.startswith("error: --timeout, --run-timeout, --read: not for --similarity-model"), line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--endpoint", "http://127.0.0.1:9/v1", "--device", "cpu"), "--device: not for --endpoint"),
        (("--model", "x.gguf", "--timeout", "5"), "--timeout: not for --model without --endpoint"),
        (("--model", "x.gguf", "--run-timeout", "5"), "--run-timeout: not for --model without --endpoint"),
        (("--model", "x.gguf", "--read", "logprobs"), "--read: not for --model without --endpoint"),
        (("--model", "x.gguf", "--api-key-env", "K"), "--api-key-env: not for --model without --endpoint"),
    ],
)
def test_a_language_model_refuses_what_its_kind_ignores(folder: Path, args: tuple, expected: str) -> None:
    assert expected in refused(*args, "--out", folder)


def test_what_applies_to_a_server_still_works(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CSTS_TEST_KEY", "k")
    with fake_server() as (url, server):
        code, lines = invoke(
            *("--endpoint", url, "--model", "fake-model", "--api-key-env", "CSTS_TEST_KEY", "--batch-size", "4"),
            *("--timeout", "30", "--run-timeout", "60", "--read", "logprobs", "--out", folder, "--force"),
        )
    assert code == 0 and "16 of 16 items rated by model:fake-model" in lines[0], lines
    assert server.posts == 32


@pytest.mark.slow
def test_what_applies_to_a_similarity_model_still_works(folder: Path) -> None:
    code, lines = invoke("--similarity-model", MINILM, "--batch-size", "4", "--device", "cpu", "--out", folder)
    assert code == 0 and lines[0].startswith("16 items scored by model:all-MiniLM-L6-v2"), lines
    assert pq.read_table(next((folder / MODEL_RATINGS).glob("*/ratings.parquet"))).num_rows == 16


@pytest.mark.parametrize(
    ("command", "args", "expected"),
    [
        (("draft", "--stage", "conditions"), ("--model", "x.gguf", "--timeout", "5"), "--timeout: not for --model"),
        (("draft", "--stage", "conditions"), ("--model", "x.gguf", "--read", "samples"), "--read: not for --model"),
        (("draft", "--stage", "conditions"), ("--endpoint", "http://127.0.0.1:9/v1", "--device", "cpu"), "--device"),
        (("check-conditions", "kept.csv"), ("--model", "x.gguf", "--run-timeout", "5"), "--run-timeout: not for"),
        (("check-conditions", "kept.csv"), ("--endpoint", "http://127.0.0.1:9/v1", "--device", "cuda"), "--device"),
    ],
)
def test_draft_and_check_refuse_what_their_model_ignores(
    folder: Path, command: tuple, args: tuple, expected: str
) -> None:
    """The other two commands that ask a language model refuse as `rate` does; their own options (--stage,
    --min-applies, --below, --out) pass."""
    out = ("--out", str(folder)) if command[0] == "draft" else ("--out", str(folder / "check"), "--below", "0.4")
    result = CliRunner().invoke(app, ["annotate", *command, *args, *out])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    assert expected in lines[0], lines
    assert not (folder / "check").exists()


def test_draft_own_options_are_not_refused(folder: Path) -> None:
    """--min-applies and --stage are draft's own: a local model with them gets past the refusal and fails only
    on the missing model file."""
    result = CliRunner().invoke(
        app, ["annotate", "draft", "--stage", "conditions", "--model", "missing.gguf", "--min-applies", "0.3",
              "--batch-size", "2", "--device", "cpu", "--out", str(folder)],
    )  # fmt: skip
    assert (result.exit_code, result.output) == (2, "error: missing.gguf: model file not found\n")


@pytest.mark.parametrize("command", [("rate",), ("draft", "--stage", "conditions"), ("check-conditions", "kept.csv")])
def test_without_a_model_the_missing_model_is_what_is_said(folder: Path, command: tuple) -> None:
    """An endpoint's option with no model at all: the line asks for the model, not "not for --model"."""
    result = CliRunner().invoke(app, ["annotate", *command, "--timeout", "5", "--out", str(folder / "out")])
    assert result.exit_code == 2 and result.output.startswith("error: give --model NAME_OR_PATH"), result.output
