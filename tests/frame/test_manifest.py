from pathlib import Path

import pytest
import yaml

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import load_manifest
from csts_pipeline.pipeline.manifest_paths import manifest_path


@pytest.mark.parametrize(
    ("dataset", "k", "max_iou", "min_length"), [("coco", 64, 0.12, 50), ("flickr30k", 128, 0.2, 48)]
)
def test_dataset_manifests_carry_the_papers_settings(dataset, k, max_iou, min_length):
    manifest = load_manifest(manifest_path(dataset, None))
    assert manifest.mine.k == k
    assert manifest.filter.max_iou == max_iou
    assert manifest.filter.min_length == min_length
    assert manifest.filter.min_cosine == 0.4 and manifest.filter.max_cosine is None
    assert manifest.filter.min_ratio == 0.7
    assert manifest.embed.model == "ViT-B-32" and manifest.embed.pretrained == "openai"
    assert manifest.work_dir.is_absolute()


def test_cli_overrides_replace_manifest_fields():
    manifest = load_manifest(manifest_path("coco", None), {"mine.k": 16, "run.device": "cpu", "embed.batch_size": None})
    assert manifest.mine.k == 16
    assert manifest.run.device == "cpu"
    assert manifest.embed.batch_size == 256  # None means "not given"


def test_relative_paths_resolve_against_the_manifest_folder(tmp_path: Path):
    path = tmp_path / "m.yaml"
    path.write_text(
        yaml.safe_dump(
            {"name": "x", "work_dir": "out", "data": {"format": "coco", "captions": "c.json", "images": "imgs"}}
        )
    )
    manifest = load_manifest(path)
    assert manifest.work_dir == tmp_path / "out"
    assert manifest.data.images == tmp_path / "imgs"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return path


BASE = "name: x\nwork_dir: out\ndata: {format: coco, captions: c.json, images: imgs}\n"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("mine: {k: 0}\n", "'mine.k'"),
        ("mine: {kk: 3}\n", "unknown key 'mine.kk'"),
        ("mine: {pairs: both}\n", "allowed: 'unordered' or 'ordered'"),
        ("filter: {min_cosine: 0.9, max_cosine: 0.5}\n", "above filter.max_cosine"),
        ("filter: {max_iou: 2}\n", "'filter.max_iou'"),
    ],
)
def test_bad_values_name_the_file_and_the_key(tmp_path: Path, extra: str, expected: str):
    path = _write(tmp_path, BASE + extra)
    with pytest.raises(UserError) as error:
        load_manifest(path)
    message = str(error.value)
    assert str(path) in message and expected in message
    assert "\n" not in message


def test_missing_key_and_bad_yaml(tmp_path: Path):
    with pytest.raises(UserError, match="missing key 'data'"):
        load_manifest(_write(tmp_path, "name: x\nwork_dir: out\n"))
    with pytest.raises(UserError, match="not valid YAML"):
        load_manifest(_write(tmp_path, "name: [x\n"))
    with pytest.raises(UserError, match="manifest not found"):
        load_manifest(tmp_path / "absent.yaml")


def test_unknown_dataset_lists_the_known_ones():
    with pytest.raises(UserError, match=r"unknown dataset 'cocoa'.*coco, flickr30k, sample"):
        manifest_path("cocoa", None)


# --- where paths resolve (issue 18) -------------------------------------------------------------------------------


def test_cli_path_overrides_resolve_against_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    project = tmp_path / "project"
    project.mkdir()
    path = project / "m.yaml"
    path.write_text(BASE)
    here = tmp_path / "elsewhere"
    here.mkdir()
    monkeypatch.chdir(here)
    manifest = load_manifest(path, {"work_dir": Path("rel")})
    assert manifest.work_dir == here / "rel"
    assert manifest.data.images == project / "imgs"  # written in the manifest: against the manifest
    assert load_manifest(path, {"work_dir": "rel"}).work_dir == project / "rel"  # a plain string is manifest text


def test_the_bundled_manifests_resolve_against_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from csts_pipeline.pipeline.manifest import open_manifest
    from csts_pipeline.pipeline.manifest_paths import bundled_manifest_dir, find_manifest

    monkeypatch.chdir(tmp_path)
    found, bundled = find_manifest("sample", None)
    assert bundled and found.parent == bundled_manifest_dir()
    manifest = open_manifest("sample", None, {"work_dir": None})
    assert manifest.work_dir == tmp_path / "runs" / "sample"
    assert manifest.data.captions == tmp_path / "data" / "sample" / "captions.json"
    assert manifest.embed.model_config_path is not None and manifest.embed.model_config_path.is_file()
    assert manifest.embed.model_config_path.name == "csts-tiny-clip.json"
    assert open_manifest("sample", None, {"work_dir": Path("x")}).work_dir == tmp_path / "x"


def test_a_manifest_in_the_current_folder_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from csts_pipeline.pipeline.manifest import open_manifest
    from csts_pipeline.pipeline.manifest_paths import find_manifest

    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "sample.yaml").write_text(BASE.replace("name: x", "name: mine"))
    monkeypatch.chdir(tmp_path)
    assert find_manifest("sample", None) == (tmp_path / "manifests" / "sample.yaml", False)
    assert open_manifest("sample", None).name == "mine"
    assert open_manifest("sample", None).work_dir == tmp_path / "out"
    found, bundled = find_manifest("coco", None)  # not here: the bundled one
    assert bundled and found.name == "coco.yaml"
    with pytest.raises(UserError, match=r"unknown dataset 'cocoa'.*coco, flickr30k, sample"):
        find_manifest("cocoa", None)


def test_package_prefix_names_a_file_inside_an_installed_package(tmp_path: Path):
    from csts_pipeline.pipeline.manifest_paths import package_file

    tiny = package_file("package:csts_pipeline.stages.embed/resources/open_clip/csts-tiny-clip.json")
    assert tiny.is_file()
    path = _write(
        tmp_path, BASE + "embed: {model_config_path: 'package:csts_pipeline.stages.embed/resources/open_clip/x.json'}\n"
    )
    assert load_manifest(path).embed.model_config_path == tiny.parent / "x.json"
    with pytest.raises(UserError, match="no Python package 'nope'"):
        package_file("package:nope/x.json")
    with pytest.raises(UserError, match="expected package:PACKAGE/PATH"):
        package_file("package:csts_pipeline.stages.embed")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("mine:\n  k: 8\n  k: 9\n", "key 'mine.k' given twice (lines 5 and 6); keep one"),  # BASE: 3 lines
        ("name: y\n", "key 'name' given twice (lines 1 and 4); keep one"),
        ("filter:\n  min_length: 5\nfilter:\n  max_iou: 0.2\n", "key 'filter' given twice (lines 4 and 6); keep one"),
    ],
)
def test_a_key_given_twice_is_refused_naming_it(tmp_path: Path, text: str, line: str):
    """YAML keeps the last of two equal keys without a word; a manifest names the file, the key and its lines."""
    from typer.testing import CliRunner

    from csts_pipeline.cli import app

    path = _write(tmp_path, BASE + text)
    result = CliRunner().invoke(app, ["status", "--manifest", str(path)])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {path}: {line}"
