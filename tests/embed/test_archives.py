"""img2dataset-style inputs: WebDataset tar shards and Parquet files with image bytes, end to end."""

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import load_manifest
from csts_pipeline.pipeline.shards import read_shards
from csts_pipeline.stages.embed import stage as embed
from csts_pipeline.stages.embed.readers.datasets import read_dataset
from csts_pipeline.stages.filter import stage as filter_stage
from csts_pipeline.stages.mine import stage as mine
from tests.conftest import write_manifest

N_IMAGES = 60


def _sample_images(sample_dataset: tuple[Path, Path]) -> list[tuple[int, bytes, list[str]]]:
    """(image id, JPEG bytes, captions) of the first N_IMAGES images of the generated sample."""
    captions, images = sample_dataset
    data = json.loads(captions.read_text())
    texts: dict[int, list[str]] = {}
    for ann in sorted(data["annotations"], key=lambda a: a["id"]):
        texts.setdefault(ann["image_id"], []).append(ann["caption"])
    chosen = sorted(data["images"], key=lambda image: image["id"])[:N_IMAGES]
    return [(image["id"], (images / image["file_name"]).read_bytes(), texts[image["id"]]) for image in chosen]


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def webdataset(tmp_path: Path, sample_dataset) -> Path:
    """Two shards; even images carry a .json caption list, odd ones one .txt caption; plus a caption-only sample."""
    folder = tmp_path / "wds"
    folder.mkdir()
    samples = _sample_images(sample_dataset)
    for shard in range(2):
        with tarfile.open(folder / f"{shard:05d}.tar", "w") as tar:
            for image_id, jpeg, texts in samples[shard::2]:
                key = f"{image_id:09d}"
                _add(tar, f"{key}.jpg", jpeg)
                if image_id % 2 == 0:
                    _add(tar, f"{key}.json", json.dumps({"caption": texts}).encode())
                else:
                    _add(tar, f"{key}.txt", texts[0].encode())
            if shard == 1:
                _add(tar, "999999999.txt", b"a caption without its image")
    return folder


@pytest.fixture
def parquet_folder(tmp_path: Path, sample_dataset) -> Path:
    """One Parquet file in img2dataset's layout (key, jpg, txt) plus a second caption column."""
    folder = tmp_path / "pq"
    folder.mkdir()
    samples = _sample_images(sample_dataset)
    table = pa.table(
        {
            "key": [f"{image_id:09d}" for image_id, _, _ in samples],
            "jpg": pa.array([jpeg for _, jpeg, _ in samples], pa.binary()),
            "txt": [texts[0] for _, _, texts in samples],
            "alt": [texts[1] if i % 3 else None for i, (_, _, texts) in enumerate(samples)],
        }
    )
    pq.write_table(table, folder / "part-0.parquet", row_group_size=16)
    return folder


def _manifest(tmp_path: Path, data: dict):
    return load_manifest(write_manifest(tmp_path, tmp_path, tmp_path, data=data, mine={"k": 4}))


def test_webdataset_reader_ids_captions_and_skips(tmp_path: Path, webdataset: Path):
    corpus = read_dataset(_manifest(tmp_path, {"format": "webdataset", "images": str(webdataset)}).data)
    assert len(corpus.image_ids) == N_IMAGES and corpus.image_ids == sorted(corpus.image_ids)
    per_image = np.bincount(np.searchsorted(corpus.image_ids, corpus.caption_image_ids))
    assert set(per_image.tolist()) == {1, 5}
    assert corpus.skip_counts() == {"line: sample without an image": 1}
    assert corpus.members[0].read()[:2] == b"\xff\xd8"  # a JPEG, read from inside the tar


def test_parquet_reader_takes_every_caption_column(tmp_path: Path, parquet_folder: Path):
    config = {"format": "parquet", "images": str(parquet_folder), "caption_columns": ["txt", "alt"]}
    corpus = read_dataset(_manifest(tmp_path, config).data)
    assert len(corpus.image_ids) == N_IMAGES
    assert len(corpus.captions) == N_IMAGES + sum(1 for i in range(N_IMAGES) if i % 3)
    assert corpus.skip_counts() == {"caption: caption is null": N_IMAGES // 3}
    assert corpus.members[-1].read()[:2] == b"\xff\xd8"


def test_parquet_without_the_named_column_is_one_line(tmp_path: Path, parquet_folder: Path):
    config = {"format": "parquet", "images": str(parquet_folder), "image_column": "png"}
    with pytest.raises(UserError, match=r"no column\(s\) png"):
        read_dataset(_manifest(tmp_path, config).data)


def test_a_caption_file_is_still_required_for_the_file_formats(tmp_path: Path):
    with pytest.raises(UserError, match=r"data\.captions is required for format coco"):
        _manifest(tmp_path, {"format": "coco", "captions": None, "images": str(tmp_path)})


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["webdataset", "parquet"])
def test_embed_mine_filter_end_to_end(tmp_path: Path, kind: str, request, sample_dataset):
    folder = request.getfixturevalue("webdataset" if kind == "webdataset" else "parquet_folder")
    manifest = _manifest(tmp_path, {"format": kind, "images": str(folder)})
    record = embed.run(manifest)
    assert record["counts"]["images_embedded"] == N_IMAGES and record["counts"]["images_skipped"] == 0
    embedded = read_shards(manifest.work_dir / "embed" / "embeddings")
    # the same image bytes from a plain folder give the same vectors
    files = load_manifest(write_manifest(tmp_path / "files", *sample_dataset))
    embed.run(files)
    reference = read_shards(files.work_dir / "embed" / "embeddings")
    wanted = pa.array(np.isin(reference.column("image_id").to_numpy(), embedded.column("image_id").to_numpy()))
    reference = reference.filter(wanted)
    np.testing.assert_allclose(
        np.stack(embedded.column("embedding").to_numpy(zero_copy_only=False)),
        np.stack(reference.column("embedding").to_numpy(zero_copy_only=False)),
        atol=1e-5,
    )
    assert mine.run(manifest)["counts"]["candidate_pairs"] > 0
    filtered = filter_stage.run(manifest)
    assert filtered["status"] == "done"
    assert read_shards(manifest.work_dir / "filter" / "kept").num_rows == filtered["counts"]["kept"]


def test_precomputed_clip_retrieval_embeddings_replace_embed(tmp_path: Path):
    """img_emb/img_emb_N.npy + metadata/metadata_N.parquet, row for row; embed only copies (normalised)."""
    folder = tmp_path / "clip"
    (folder / "img_emb").mkdir(parents=True)
    (folder / "metadata").mkdir()
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((50, 8)).astype(np.float32) * 3
    for part, (lo, hi) in enumerate([(0, 30), (30, 50)]):
        np.save(folder / "img_emb" / f"img_emb_{part}.npy", vectors[lo:hi])
        keys = [f"{i:06d}" for i in range(lo, hi)]
        table = pa.table({"key": keys, "caption": [f"caption number {i}" for i in range(lo, hi)]})
        pq.write_table(table, folder / "metadata" / f"metadata_{part}.parquet")
    data = {"format": "clip-retrieval", "images": str(folder), "caption_columns": ["caption"]}
    manifest = _manifest(tmp_path, data)
    record = embed.run(manifest)
    assert record["counts"]["images_embedded"] == 50 and record["params"]["model"] == "precomputed"
    table = read_shards(manifest.work_dir / "embed" / "embeddings")
    assert table.column("image_id").to_pylist() == list(range(50))
    expected = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    np.testing.assert_allclose(np.stack(table.column("embedding").to_numpy(zero_copy_only=False)), expected, rtol=1e-5)
    assert mine.run(manifest)["counts"]["image_pairs"] > 0
