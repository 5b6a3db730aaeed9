"""Every bad input found so far (issue 25), one case each, with its exact outcome: a one-line error naming the file
and the problem (exit code 2, no traceback, nothing committed, the previous output untouched), or a reported skip
where the rest of the input is good."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import struct
import tarfile
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from typer.testing import CliRunner

from csts_pipeline.cli import app
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import load_manifest
from csts_pipeline.stages.embed.readers.datasets import read_dataset
from tests.conftest import first_images, write_manifest

runner = CliRunner()
IMAGES = 6


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, sample_dataset: tuple[Path, Path]) -> tuple[dict, Path]:
    """The first images of the generated sample: their COCO JSON (as a dict) and their folder."""
    root = tmp_path_factory.mktemp("small") / "images"
    return first_images(sample_dataset, IMAGES, root), root


def coco_manifest(tmp: Path, small: tuple[dict, Path], edit: Callable[[dict, Path], None] | None = None) -> Path:
    """A manifest over a copy of the small COCO data, after `edit(coco, images)`."""
    coco, images = json.loads(json.dumps(small[0])), tmp / "images"
    shutil.copytree(small[1], images)
    if edit is not None:
        edit(coco, images)
    (tmp / "captions.json").write_text(json.dumps(coco))
    return write_manifest(tmp, tmp / "captions.json", images)


def manifest_for(tmp: Path, data: dict, **sections: dict) -> Path:
    path = write_manifest(tmp, tmp / "unused.json", tmp, **sections)
    raw = yaml.safe_load(path.read_text())
    raw["data"] = data
    path.write_text(yaml.safe_dump(raw))
    return path


def cli_error(*args: str) -> str:
    """Run the CLI, expecting a user error: exit 2 and one line, no traceback. Returns that line."""
    result = runner.invoke(app, list(args))
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    return errors[0]


def webdataset(folder: Path, samples: dict[str, bytes], compress: bool = False) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for key, image in samples.items():
            for suffix, data in ((".jpg", image), (".txt", f"a caption of sample {key}".encode())):
                info = tarfile.TarInfo(key + suffix)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    (folder / "00000.tar").write_bytes(zlib.compress(data, wbits=31) if compress else data)


def clip_retrieval(folder: Path, vectors: np.ndarray) -> None:
    (folder / "img_emb").mkdir(parents=True)
    (folder / "metadata").mkdir()
    np.save(folder / "img_emb" / "img_emb_0.npy", vectors)
    rows = len(vectors) if vectors.ndim else 1
    table = pa.table({"key": [f"{i:09d}" for i in range(rows)], "caption": [f"caption {i}" for i in range(rows)]})
    pq.write_table(table, folder / "metadata" / "metadata_0.parquet")


def png_header(path: Path, width: int, height: int) -> None:
    """A PNG whose header says width x height (PIL reads only the header before decoding)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    idat = zlib.compress(b"\0" * 16)
    chunk += struct.pack(">I", len(idat)) + b"IDAT" + idat + struct.pack(">I", zlib.crc32(b"IDAT" + idat))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk)


# --- bad input, wrong result --------------------------------------------------------------------------------------


def test_results_csv_with_an_unterminated_quote_is_refused(tmp_path: Path):
    from csts_pipeline.stages.annotate.crowd.screening import read_results

    path = tmp_path / "results.csv"
    path.write_text('pair_id,worker_id,rating\n1,w1,3\n2,w1,"4\n3,w2,5\n4,w2,2\n')
    with pytest.raises(UserError, match=r"results.csv: line \d+: not valid CSV \(unexpected end of data\)"):
        read_results(path, ("pair_id", "rating"))


def test_webdataset_keys_0_and_000000000_are_refused(tmp_path: Path, small: tuple[dict, Path]):
    jpeg = next(small[1].iterdir()).read_bytes()
    webdataset(tmp_path / "shards", {"0": jpeg, "000000000": jpeg})
    manifest = manifest_for(tmp_path, {"format": "webdataset", "images": str(tmp_path / "shards")})
    line = cli_error("embed", "--manifest", str(manifest))
    assert line == "error: sample keys '0' and '000000000' are the same image id 0; make them unique"
    assert not (tmp_path / "work" / "embed").exists()


def test_mine_k_true_is_not_the_number_1(tmp_path: Path, small: tuple[dict, Path]):
    manifest = coco_manifest(tmp_path, small)
    raw = yaml.safe_load(manifest.read_text())
    raw["mine"]["k"] = True
    manifest.write_text(yaml.safe_dump(raw))
    line = cli_error("mine", "--manifest", str(manifest))
    assert f"{manifest}: bad value for 'mine.k' (True)" in line and "true/false" in line


def test_a_stray_parquet_file_in_an_output_folder_is_refused(tmp_path: Path, small: tuple[dict, Path]):
    manifest = coco_manifest(tmp_path, small)
    assert runner.invoke(app, ["embed", "--manifest", str(manifest)]).exit_code == 0
    stray = tmp_path / "work" / "embed" / "embeddings" / "extra.parquet"
    shutil.copy(stray.with_name("part-00000.parquet"), stray)
    status = runner.invoke(app, ["status", "--manifest", str(manifest)])
    assert any(line.split()[:2] == ["embed", "incomplete"] for line in status.output.splitlines()), status.output
    assert f"{stray}: not listed in _stage.json" in status.output
    line = cli_error("mine", "--manifest", str(manifest))
    assert line.startswith(f"error: {stray}: not listed in _stage.json")
    assert line.endswith("rebuild it with `csts-pipeline embed --force`")
    assert not (tmp_path / "work" / "mine").exists()


def test_embed_with_no_readable_image_commits_nothing(tmp_path: Path, small: tuple[dict, Path]):
    def garble(coco: dict, images: Path) -> None:
        for path in images.iterdir():
            path.write_bytes(b"not an image")

    manifest = coco_manifest(tmp_path, small, garble)
    line = cli_error("embed", "--manifest", str(manifest))
    assert line.startswith(f"error: {tmp_path / 'images'}: none of the {IMAGES} images could be embedded, e.g. ")
    assert line.endswith("nothing committed")
    assert not (tmp_path / "work" / "embed").exists()


def test_a_gzip_tar_shard_is_refused(tmp_path: Path, small: tuple[dict, Path]):
    webdataset(tmp_path / "shards", {"1": next(small[1].iterdir()).read_bytes()}, compress=True)
    manifest = manifest_for(tmp_path, {"format": "webdataset", "images": str(tmp_path / "shards")})
    line = cli_error("embed", "--manifest", str(manifest))
    shard = tmp_path / "shards" / "00000.tar"
    assert line == f"error: {shard}: a gzip-compressed tar; decompress it to a plain .tar shard first"


def test_nan_embeddings_from_clip_retrieval_are_refused(tmp_path: Path):
    vectors = np.random.default_rng(0).normal(size=(5, 8)).astype(np.float32)
    vectors[3, 2] = np.nan
    clip_retrieval(tmp_path / "clip", vectors)
    data = {"format": "clip-retrieval", "images": str(tmp_path / "clip"), "caption_columns": ["caption"]}
    line = cli_error("embed", "--manifest", str(manifest_for(tmp_path, data)))
    npy = tmp_path / "clip" / "img_emb" / "img_emb_0.npy"
    assert line.startswith(f"error: {npy}: row 3 (image 3) is not finite (NaN or infinity)")
    assert not (tmp_path / "work" / "embed").exists()


def test_the_lock_message_names_no_stale_pid(tmp_path: Path):
    from csts_pipeline.pipeline.locks import _holder, lock_path, stage_lock

    with stage_lock(tmp_path, "embed"):
        assert lock_path(tmp_path, "embed").read_text() == f"{os.getpid()}\n"
    assert lock_path(tmp_path, "embed").read_text() == ""  # released: no pid left behind
    lock_path(tmp_path, "embed").write_text("999999999\n")  # a pid no process has
    fd = os.open(lock_path(tmp_path, "embed"), os.O_RDONLY)
    try:
        assert _holder(fd) == "another run"
    finally:
        os.close(fd)


def test_a_symlink_out_of_the_image_folder_is_skipped(tmp_path: Path, small: tuple[dict, Path]):
    outside = tmp_path / "secret.jpg"

    def link(coco: dict, images: Path) -> None:
        name = coco["images"][0]["file_name"]
        shutil.move(images / name, outside)
        (images / name).symlink_to(outside)

    manifest = coco_manifest(tmp_path, small, link)
    corpus = read_dataset(load_manifest(manifest).data)
    first = small[0]["images"][0]
    assert first["id"] not in corpus.image_ids and len(corpus.image_ids) == IMAGES - 1
    assert corpus.skip_counts()["image: file outside the image folder (a symlink)"] == 1


def test_a_144_megapixel_png_is_skipped_not_decoded(tmp_path: Path):
    from csts_pipeline.stages.embed.images import _PreprocessedImages

    png_header(tmp_path / "huge.png", 12_000, 12_000)
    _, tensor, reason = _PreprocessedImages([tmp_path / "huge.png"], lambda image: image)[0]
    assert tensor is None
    assert reason == "unreadable image (ValueError: image too large to decode: 12000x12000 pixels, above 64,000,000)"


# --- bad input, traceback -----------------------------------------------------------------------------------------


def test_a_caption_with_a_lone_surrogate_is_skipped(tmp_path: Path, small: tuple[dict, Path]):
    def surrogate(coco: dict, images: Path) -> None:
        coco["annotations"][0]["caption"] = "a dog \ud800 on a mat"

    manifest = coco_manifest(tmp_path, small, surrogate)
    corpus = read_dataset(load_manifest(manifest).data)
    assert corpus.skip_counts() == {"caption: caption is not valid Unicode (a lone surrogate)": 1}
    corpus.captions_table()  # writable as UTF-8


def test_an_image_id_of_2_63_is_refused(tmp_path: Path, small: tuple[dict, Path]):
    def huge(coco: dict, images: Path) -> None:
        coco["images"][1]["id"] = 2**63

    manifest = coco_manifest(tmp_path, small, huge)
    line = cli_error("embed", "--manifest", str(manifest))
    assert line == f"error: {tmp_path / 'captions.json'}: images[1].id is {2**63}, outside the 64-bit integer range"


def test_a_5000_character_file_name_is_skipped(tmp_path: Path, small: tuple[dict, Path]):
    def long_name(coco: dict, images: Path) -> None:
        coco["images"][2]["file_name"] = "x" * 5000 + ".jpg"

    corpus = read_dataset(load_manifest(coco_manifest(tmp_path, small, long_name)).data)
    assert corpus.skip_counts()["image: file name too long"] == 1 and len(corpus.image_ids) == IMAGES - 1


@pytest.mark.parametrize("fmt", ["flickr30k-token", "flickr30k-csv"])
def test_flickr_files_that_are_not_utf8_are_refused(tmp_path: Path, fmt: str):
    path = tmp_path / "captions.txt"
    header = b"image_name| comment_number| comment\n" if fmt == "flickr30k-csv" else b""
    line = b"1000.jpg| 0| a caf\xe9\n" if fmt == "flickr30k-csv" else b"1000.jpg#0\ta caf\xe9\n"
    path.write_bytes(header + line)
    manifest = manifest_for(tmp_path, {"format": fmt, "captions": str(path), "images": str(tmp_path)})
    offset = len(header) + line.index(b"\xe9")
    assert cli_error("embed", "--manifest", str(manifest)) == (
        f"error: {path}: not UTF-8 text (byte {offset}: invalid continuation byte); convert it to UTF-8"
    )


def test_a_parquet_image_column_that_is_not_binary_is_refused(tmp_path: Path):
    (tmp_path / "pq").mkdir()
    pq.write_table(pa.table({"key": ["1"], "jpg": ["text"], "txt": ["a caption"]}), tmp_path / "pq" / "a.parquet")
    manifest = manifest_for(tmp_path, {"format": "parquet", "images": str(tmp_path / "pq")})
    assert cli_error("embed", "--manifest", str(manifest)) == (
        f"error: {tmp_path / 'pq' / 'a.parquet'}: image column 'jpg' holds string, not image bytes (binary)"
    )


def test_a_parquet_file_that_is_not_parquet_is_refused(tmp_path: Path):
    (tmp_path / "pq").mkdir()
    (tmp_path / "pq" / "a.parquet").write_text("just text")
    manifest = manifest_for(tmp_path, {"format": "parquet", "images": str(tmp_path / "pq")})
    line = cli_error("embed", "--manifest", str(manifest))
    assert line.startswith(f"error: {tmp_path / 'pq' / 'a.parquet'}: not a readable Parquet file (")


def test_a_clip_retrieval_npy_of_the_wrong_shape_is_refused(tmp_path: Path):
    clip_retrieval(tmp_path / "clip", np.zeros(5, np.float32))
    data = {"format": "clip-retrieval", "images": str(tmp_path / "clip"), "caption_columns": ["caption"]}
    npy = tmp_path / "clip" / "img_emb" / "img_emb_0.npy"
    assert cli_error("embed", "--manifest", str(manifest_for(tmp_path, data))) == (
        f"error: {npy}: shape (5,) float32; expected (rows, dim) float embeddings"
    )


def test_a_manifest_that_is_not_utf8_is_refused(tmp_path: Path):
    path = tmp_path / "m.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    assert (
        cli_error("status", "--manifest", str(path))
        == f"error: {path}: not UTF-8 text (byte 9: invalid continuation byte)"
    )


def test_mine_null_with_a_command_line_override(tmp_path: Path, small: tuple[dict, Path]):
    manifest = coco_manifest(tmp_path, small)
    raw = yaml.safe_load(manifest.read_text())
    raw["mine"] = None
    manifest.write_text(yaml.safe_dump(raw))
    line = cli_error("mine", "--manifest", str(manifest), "--k", "3")
    assert (
        line == f"error: {tmp_path / 'work' / 'embed'}: no finished embed output here; run `csts-pipeline embed` first"
    )


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        ([1, 2], "not a JSON object"),
        ({"timings": {"seconds": "1"}, "counts": {}}, "'timings.seconds' is not a number"),
        ({"timings": {"seconds": 1}, "output_files": []}, "'output_files' is not an object"),
        ({"timings": {"seconds": 1}, "output_files": {"a": 3}}, "output_files['a'] has no integer 'bytes'"),
        ({"timings": {"seconds": 1}, "counts": "3"}, "'counts' is not an object"),
    ],
)
def test_a_stage_record_of_the_wrong_shape_is_refused(tmp_path: Path, small: tuple[dict, Path], record, problem):
    manifest = coco_manifest(tmp_path, small)
    folder = tmp_path / "work" / "embed"
    folder.mkdir(parents=True)
    (folder / "_stage.json").write_text(json.dumps(record))
    expected = f"{folder / '_stage.json'}: corrupt stage record ({problem}); rerun the stage with --force"
    status = runner.invoke(app, ["status", "--manifest", str(manifest)])
    assert status.exit_code == 0 and f"embed    corrupt   {expected}" in status.output, status.output
    assert cli_error("mine", "--manifest", str(manifest)) == f"error: {expected}"


def test_train_precision_fp64_is_refused(tmp_path: Path):
    line = cli_error("train", "--train", str(tmp_path / "x.csv"), "--out", str(tmp_path / "o"), "--precision", "fp64")
    assert line == "error: --precision 'fp64': value error, use auto, fp32, fp16 or bf16"
    line = cli_error("evaluate", "--model", "x", "--data", str(tmp_path / "x.csv"), "--precision", "fp64")
    assert line == "error: --precision 'fp64': use auto, fp32, fp16 or bf16"


@pytest.mark.slow
def test_a_pickle_as_embed_pretrained_is_refused(tmp_path: Path, small: tuple[dict, Path]):
    manifest = coco_manifest(tmp_path, small)
    (tmp_path / "weights.pkl").write_bytes(pickle.dumps({"not": "a checkpoint"}))
    raw = yaml.safe_load(manifest.read_text())
    raw["embed"] = {"model": "ViT-B-32", "pretrained": str(tmp_path / "weights.pkl"), "num_workers": 0}
    manifest.write_text(yaml.safe_dump(raw))
    line = cli_error("embed", "--manifest", str(manifest))
    assert line.startswith(f"error: cannot load CLIP ViT-B-32/{tmp_path / 'weights.pkl'} (embed.pretrained): ")
    assert not (tmp_path / "work" / "embed").exists()


# --- caches and cosines: values that must be finite ---------------------------------------------------------------


@pytest.mark.parametrize("damage", ["nan rows", "wrong width"])
def test_a_bad_sentence_embedding_cache_is_not_used(tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture):
    from csts_pipeline.pipeline.manifest import FilterConfig
    from csts_pipeline.stages.filter.scoring import sentence_embeddings

    config = FilterConfig(text_encoder="packaged:all-MiniLM-L6-v2", text_pooling="model")
    texts = ["a dog on a mat", "two cats", "a red bus"]
    good, info = sentence_embeddings(config, texts, device=torch.device("cpu"), cache_dir=tmp_path)
    path = Path(info["cache"])
    bad = good.copy()
    if damage == "nan rows":
        bad[1] = np.nan
    else:
        bad = np.concatenate([bad, bad], axis=1) / np.sqrt(2)
    np.save(path, bad)
    again, info = sentence_embeddings(config, texts, device=torch.device("cpu"), cache_dir=tmp_path)
    assert info["encoded"] and np.allclose(again, good, atol=1e-5)
    reason = "NaN or infinite values" if damage == "nan rows" else f"{2 * good.shape[1]} columns, but the encoder"
    assert f"{path}: {reason}" in caplog.text


def test_nan_sentence_embeddings_never_reach_min_cosine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from csts_pipeline.pipeline.manifest import FilterConfig
    from csts_pipeline.stages.filter import scoring

    monkeypatch.setattr(scoring, "load_text_encoder", lambda *args: None)
    monkeypatch.setattr(scoring, "encode_texts", lambda model, texts, *a, **k: np.full((len(texts), 4), np.nan))
    config = FilterConfig(text_encoder="packaged:all-MiniLM-L6-v2", min_cosine=0.5)
    with pytest.raises(UserError, match=r"gave a NaN or infinite embedding for 2 sentence\(s\), e.g. 'a dog'"):
        scoring.sentence_embeddings(config, ["a dog", "a cat"], device="cpu", cache_dir=tmp_path)
    assert not list(tmp_path.iterdir())  # nothing cached


def test_embed_out_naming_an_existing_file_is_refused(tmp_path: Path, small: tuple[dict, Path]):
    manifest = coco_manifest(tmp_path, small)
    taken = tmp_path / "notes.txt"
    taken.write_text("mine\n")
    line = cli_error("embed", "--manifest", str(manifest), "--out", str(taken))
    assert line == f"error: {taken}: a file, not a folder; work_dir (--out) names the folder of the outputs"
    assert taken.read_text() == "mine\n"


@pytest.mark.parametrize(
    ("option", "value", "line"),
    [
        ("--seed", "-1", "error: --seed -1: input should be greater than or equal to 0"),
        ("--seed", str(2**32), "error: --seed 4294967296: input should be less than or equal to 4294967295"),
        ("--seeds", "42,-1", "error: --seeds '42,-1': each seed must be 0 to 4294967295"),
    ],
)
def test_train_seed_out_of_numpys_range_is_refused(tmp_path: Path, option: str, value: str, line: str):
    data = Path(__file__).resolve().parents[2] / "docs" / "examples" / "stsb" / "sts-test-sample.csv"
    out = tmp_path / "train"
    assert cli_error("train", "--train", str(data), "--task", "stsb", "--out", str(out), option, value) == line
    assert not out.exists()


def test_two_coco_image_ids_naming_one_file_are_embedded_once(tmp_path: Path, small: tuple[dict, Path]):
    """One file is one image: embedded once, under the first id, with the captions of both; the second id is a
    reported skip naming both ids (docs/schemas.md)."""

    def twice(coco: dict, images: Path) -> None:
        first = coco["images"][0]
        coco["images"].append({**first, "id": 10**6})
        coco["annotations"].append({"id": 9000, "image_id": 10**6, "caption": "the same picture, described again"})

    manifest = coco_manifest(tmp_path, small, twice)
    result = runner.invoke(app, ["embed", "--manifest", str(manifest)])
    assert result.exit_code == 0, result.output
    assert "embed: skipped: 1 image (same file as an earlier image id; its captions go to that one)" in (
        result.output.splitlines()
    )
    first = small[0]["images"][0]
    embed = tmp_path / "work" / "embed"
    embedded = pq.read_table(embed / "embeddings").column("image_id").to_pylist()
    assert sorted(embedded) == sorted(image["id"] for image in small[0]["images"]) and 10**6 not in embedded
    captions = pq.read_table(embed / "captions").to_pylist()
    assert {"caption_id": 9000, "image_id": first["id"], "caption": "the same picture, described again"} in captions
    skips = json.loads((embed / "_stage.json").read_text())["reader_skip_counts"]
    assert skips == {"image: same file as an earlier image id; its captions go to that one": 1}
    corpus = read_dataset(load_manifest(manifest).data)
    assert [s.ref for s in corpus.skips] == [f"{10**6} ({first['file_name']}, as image {first['id']})"]
