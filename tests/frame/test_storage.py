"""Work folders, inputs and manifests as fsspec URLs (pipeline.storage): a run on memory:// or file:// holds the
tables of a local run, a rerun is a no-op, and a publish killed before its record leaves the store's output whole.
memory:// lives in one process, so those runs go through typer's CliRunner; the crash test kills a CLI process."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest
import yaml
from typer.testing import CliRunner

from csts_pipeline.cli import app
from csts_pipeline.pipeline.failpoints import FAILPOINT
from csts_pipeline.pipeline.storage import CACHE_ENV, mirror_folder, remote_problems, remote_record
from csts_pipeline.pipeline.urls import filesystem
from tests.conftest import REPO, STAGES, contents, first_images, write_manifest

runner = CliRunner()
IMAGES = 40  # of the generated sample's 240: the same code paths, a fraction of the time


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Working caches and input copies in a folder of this module's own."""
    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(folder))
        yield folder


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, sample_dataset: tuple[Path, Path]) -> tuple[Path, Path]:
    """The first images of the generated sample and their captions, in COCO JSON."""
    root = tmp_path_factory.mktemp("small")
    coco = first_images(sample_dataset, IMAGES, root / "images")
    (root / "captions.json").write_text(json.dumps(coco))
    return root / "captions.json", root / "images"


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory, small: tuple[Path, Path]) -> Path:
    return write_manifest(tmp_path_factory.mktemp("manifest"), *small, embed={"images_per_shard": 15})


@pytest.fixture(scope="module")
def local(manifest: Path) -> Path:
    """The local run every URL run is compared with."""
    result = runner.invoke(app, ["run", "--manifest", str(manifest)])
    assert result.exit_code == 0, result.output
    return manifest.parent / "work"


def store_contents(url: str, into: Path, stages: tuple[str, ...] = STAGES) -> dict[str, object]:
    """contents() of what the store's records list: each stage's files of its committed generation."""
    fs, root = filesystem(url)
    for stage in stages:
        record = remote_record(url, stage)
        assert record is not None and not remote_problems(url, stage, record)
        for name in record["output_files"]:
            (into / stage / name).parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(f"{root}/{stage}/{record['generation']}/{name}", str(into / stage / name))
        (into / stage / "_stage.json").write_text(json.dumps(record))
    return contents(into, stages)


def other_shards(manifest: Path, tmp_path: Path) -> Path:
    """The same manifest with other embed shards: another output (fingerprint and shards), the same rows."""
    raw = yaml.safe_load(manifest.read_text())
    raw["embed"]["images_per_shard"] = 10
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump(raw))
    return other


def published_then_other(manifest: Path, tmp_path: Path, url: str) -> tuple[dict, Path]:
    """Embed published to `url`; (its store record, the manifest of another embed output: `other_shards`)."""
    first = runner.invoke(app, ["embed", "--manifest", str(manifest), "--out", url])
    assert first.exit_code == 0, first.output
    return remote_record(url, "embed"), other_shards(manifest, tmp_path)


def seed_text_embeddings(local: Path, url: str) -> None:
    """The local run's sentence-embedding cache in the URL's working cache, so filter skips encoding."""
    shutil.copytree(local / "text_embeddings", mirror_folder(url) / "text_embeddings", dirs_exist_ok=True)


def test_a_memory_work_dir_holds_the_local_tables_and_a_rerun_is_a_noop(manifest: Path, local: Path, tmp_path: Path):
    url = "memory://bucket/runs/a"
    seed_text_embeddings(local, url)
    result = runner.invoke(app, ["run", "--manifest", str(manifest), "--out", url])
    assert result.exit_code == 0, result.output
    assert store_contents(url, tmp_path / "store") == contents(local)

    status = runner.invoke(app, ["status", "--manifest", str(manifest), "--out", url])
    assert status.exit_code == 0, status.output
    assert [line.split()[1] for line in status.output.splitlines() if line.split()[0] in STAGES] == ["done"] * 3

    records = {stage: remote_record(url, stage) for stage in STAGES}
    again = runner.invoke(app, ["run", "--manifest", str(manifest), "--out", url])
    assert again.exit_code == 0 and again.output.count("up to date: memory://bucket/runs/a/") == 3, again.output
    shutil.rmtree(mirror_folder(url))  # the store, not the cache, is what a run is checked against
    fresh = runner.invoke(app, ["run", "--manifest", str(manifest), "--out", url])
    assert fresh.exit_code == 0 and fresh.output.count("up to date") == 3, fresh.output
    assert {stage: remote_record(url, stage) for stage in STAGES} == records

    shard = f"/bucket/runs/a/embed/{records['embed']['generation']}/embeddings/part-00000.parquet"
    fsspec.filesystem("memory").pipe_file(shard, b"truncated")
    damaged = runner.invoke(app, ["status", "--manifest", str(manifest), "--out", url])
    assert f"memory://{shard}: 9 bytes, the record says" in damaged.output, damaged.output
    assert damaged.output.split()[:2] == ["embed", "incomplete"]


def test_inputs_and_manifest_given_as_urls(manifest: Path, local: Path, small: tuple[Path, Path], tmp_path: Path):
    """A manifest on the store whose relative paths (work_dir, captions, images) are URLs beside it."""
    fs = fsspec.filesystem("memory")
    captions, images = small
    fs.put(str(images), "/data/coco/images", recursive=True)
    fs.put_file(str(captions), "/data/coco/captions.json")
    raw = yaml.safe_load(manifest.read_text())
    raw["work_dir"] = "work"
    raw["data"] |= {"captions": "captions.json", "images": "images"}
    fs.pipe_file("/data/coco/manifest.yaml", yaml.safe_dump(raw).encode())

    result = runner.invoke(app, ["embed", "--manifest", "memory://data/coco/manifest.yaml"])
    assert result.exit_code == 0, result.output
    assert store_contents("memory://data/coco/work", tmp_path, ("embed",)) == contents(local, ("embed",))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--out", "s3://bucket/run"],
            "s3fs",
            marks=pytest.mark.skipif(importlib.util.find_spec("s3fs") is not None, reason="s3fs is installed"),
        ),
        (["--out", "nope://bucket/run"], "nope://bucket/run"),
        (["--manifest", "memory://nowhere/m.yaml"], "memory://nowhere/m.yaml: not found"),
    ],
)
def test_a_bad_url_is_a_one_line_error(manifest: Path, args: list[str], message: str):
    given = args if "--manifest" in args else ["--manifest", str(manifest), *args]
    result = runner.invoke(app, ["status", *given])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def cli(*args: str, failpoint: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}
    if failpoint:
        env[FAILPOINT] = failpoint
    command = [sys.executable, "-m", "csts_pipeline", *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)


def test_a_publish_killed_before_its_record_leaves_the_store_output_whole(manifest: Path, local: Path, tmp_path: Path):
    url = f"file://{tmp_path / 'store'}"
    before, other = published_then_other(manifest, tmp_path, url)
    args = ("embed", "--manifest", str(other), "--out", url)

    killed = cli(*args, failpoint="embed:publish-before-record")
    assert killed.returncode == -9, killed.stderr
    assert remote_record(url, "embed") == before and not remote_problems(url, "embed", before)
    assert store_contents(url, tmp_path / "old", ("embed",)) == contents(local, ("embed",))

    resumed = runner.invoke(app, list(args))  # the cache holds the committed run: published, not recomputed
    assert resumed.exit_code == 0 and "up to date" in resumed.output, resumed.output
    after = remote_record(url, "embed")
    assert after["fingerprint"] != before["fingerprint"] and after["counts"]["shards"] == 4
    assert not (tmp_path / "store" / "embed" / before["generation"]).exists()
    tables = {name: rows for name, rows in contents(local, ("embed",)).items() if not name.endswith("/counts")}
    assert {name: store_contents(url, tmp_path / "new", ("embed",))[name] for name in tables} == tables


class Crash(Exception):
    """A failpoint reached, in this process: what a kill would leave on the store, without killing pytest."""


def test_a_publish_cut_after_its_first_file_leaves_the_store_output_whole(
    manifest: Path, local: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    url = "memory://bucket/runs/cut"
    before, other = published_then_other(manifest, tmp_path, url)

    def crash(name: str) -> None:
        if name == "embed:publish-after-first-file":
            raise Crash(name)

    monkeypatch.setattr("csts_pipeline.pipeline.storage.failpoint", crash)
    cut = runner.invoke(app, ["embed", "--manifest", str(other), "--out", url])
    assert isinstance(cut.exception, Crash)
    generations = [
        path for path in fsspec.filesystem("memory").ls("/bucket/runs/cut/embed", detail=False) if "gen-" in path
    ]
    assert len(generations) == 2  # the committed one, and the partial upload no record names
    assert remote_record(url, "embed") == before
    assert store_contents(url, tmp_path / "store", ("embed",)) == contents(local, ("embed",))


def test_status_after_a_crash_before_publish_publishes_the_cached_commit(manifest: Path, tmp_path: Path):
    """`status` pulls embed (mine's upstream) into the cache: a committed but unpublished embed there is published
    first, never replaced by the store's older output (docs/storage.md)."""
    url = f"file://{tmp_path / 'store'}"
    before, other = published_then_other(manifest, tmp_path, url)
    killed = cli("embed", "--manifest", str(other), "--out", url, failpoint="embed:publish-before-record")
    assert killed.returncode == -9, killed.stderr
    cached = json.loads((mirror_folder(url) / "embed" / "_stage.json").read_text())
    assert cached["fingerprint"] != before["fingerprint"] and "generation" not in cached

    status = runner.invoke(app, ["status", "--manifest", str(other), "--out", url])
    assert status.exit_code == 0, status.output
    after = remote_record(url, "embed")
    assert after["fingerprint"] == cached["fingerprint"] and not remote_problems(url, "embed", after)
    assert [line.split()[1] for line in status.output.splitlines() if line.startswith("embed")] == ["done"]


def test_a_publish_killed_before_its_cleanup_is_committed(manifest: Path, tmp_path: Path):
    """Killed after the store's record is written and before the replaced generation is deleted: the new output is
    committed (store and cache name the new generation), the old generation's files are only left over, and the
    next run is a no-op that publishes nothing again."""
    url = f"file://{tmp_path / 'store'}"
    before, other = published_then_other(manifest, tmp_path, url)
    killed = cli("embed", "--manifest", str(other), "--out", url, failpoint="embed:publish-before-cleanup")
    assert killed.returncode == -9, killed.stderr
    after = remote_record(url, "embed")
    assert after["generation"] != before["generation"] and not remote_problems(url, "embed", after)
    assert (tmp_path / "store" / "embed" / before["generation"]).is_dir()  # not cleaned up: harmless, unnamed
    cached = json.loads((mirror_folder(url) / "embed" / "_stage.json").read_text())
    assert cached["generation"] == after["generation"]
    again = runner.invoke(app, ["embed", "--manifest", str(other), "--out", url])
    assert again.exit_code == 0 and "up to date" in again.output, again.output
    assert remote_record(url, "embed") == after
