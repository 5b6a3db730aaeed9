import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from csts_pipeline.cli import app
from tests.conftest import REPO, write_manifest

runner = CliRunner()


@pytest.fixture
def manifest(tmp_path: Path, sample_dataset: tuple[Path, Path]) -> Path:
    return write_manifest(tmp_path, *sample_dataset, embed={"images_per_shard": 100})


@pytest.mark.slow
def test_run_then_status_then_noop(manifest: Path):
    result = runner.invoke(app, ["run", "--manifest", str(manifest)])
    assert result.exit_code == 0, result.output
    assert "demo encoders" in result.output
    assert "embed: done" in result.output and "mine: done" in result.output

    status = runner.invoke(app, ["status", "--manifest", str(manifest)])
    assert status.exit_code == 0
    lines = {line.split()[0]: line.split()[1] for line in status.output.splitlines() if line.strip()}
    assert lines["embed"] == "done" and lines["mine"] == "done"

    again = runner.invoke(app, ["run", "--manifest", str(manifest)])
    assert again.exit_code == 0 and again.output.count("up to date") >= 2

    changed = runner.invoke(app, ["status", "--manifest", str(manifest)])
    assert changed.exit_code == 0
    rerun_k = runner.invoke(app, ["mine", "--manifest", str(manifest), "--k", "3"])
    assert rerun_k.exit_code == 0 and "mine: done" in rerun_k.output
    stale = runner.invoke(app, ["status", "--manifest", str(manifest)])
    assert any(line.startswith("mine") and "stale" in line for line in stale.output.splitlines())


def test_status_on_an_empty_work_dir_says_missing(manifest: Path):
    result = runner.invoke(app, ["status", "--manifest", str(manifest)])
    assert result.exit_code == 0
    assert all("missing" in line for line in result.output.splitlines() if line.strip())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["embed", "--dataset", "nope"], "unknown dataset 'nope'"),
        (["mine", "--manifest", "/nonexistent/m.yaml"], "manifest not found"),
        (["embed"], "give --dataset NAME or --manifest PATH"),
    ],
)
def test_user_mistakes_exit_2_with_one_line(args: list[str], message: str):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_cuda_without_gpu_is_a_one_line_error(manifest: Path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    process = subprocess.run(
        [sys.executable, "-m", "csts_pipeline", "embed", "--manifest", str(manifest), "--device", "cuda"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert process.returncode == 2
    assert process.stderr.strip().splitlines() == [
        "error: --device cuda: no CUDA GPU is available on this machine (use --device cpu)"
    ]


def test_every_command_documents_every_option():
    import typer.main

    group = typer.main.get_command(app)
    for name, command in group.commands.items():
        assert command.help, name
        for param in command.params:
            assert getattr(param, "help", None), f"{name} --{param.name} has no help text"


def test_embed_summary_prints_the_reader_skips_in_one_line(tmp_path: Path, sample_dataset: tuple[Path, Path]):
    import json

    captions, images = sample_dataset
    data = json.loads(captions.read_text())
    data["images"] = [*data["images"][:6], {"id": 10**6, "file_name": "../escape.jpg"}]
    kept = {image["id"] for image in data["images"]}
    data["annotations"] = [a for a in data["annotations"] if a["image_id"] in kept]
    data["annotations"][0]["caption"] = None
    data["annotations"][1]["caption"] = 7
    data["annotations"].append({"id": 10**6, "image_id": 10**6, "caption": "Escaping."})
    path = tmp_path / "captions.json"
    path.write_text(json.dumps(data))
    manifest = write_manifest(tmp_path, path, images)
    result = runner.invoke(app, ["embed", "--manifest", str(manifest)])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("embed: skipped:"))
    assert "1 caption (caption is null)" in line and "1 caption (caption is not a string)" in line
    assert "1 image (file name outside the image folder)" in line


def test_relative_out_lands_under_the_current_folder(
    tmp_path: Path, sample_dataset: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
):
    manifest = write_manifest(tmp_path / "project", *sample_dataset)
    here = tmp_path / "elsewhere"
    here.mkdir()
    monkeypatch.chdir(here)
    result = runner.invoke(app, ["embed", "--manifest", "../project/manifest.yaml", "--out", "rel"])
    assert result.exit_code == 0, result.output
    assert (here / "rel" / "embed" / "_stage.json").is_file()
    assert not (REPO / "rel").exists() and not (tmp_path / "project" / "rel").exists()
    status = runner.invoke(app, ["status", "--manifest", str(manifest), "--out", "rel"])
    assert status.exit_code == 0 and status.output.startswith("embed    done"), status.output
