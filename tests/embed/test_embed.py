import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.executor import staging_folder
from csts_pipeline.pipeline.manifest import load_manifest
from csts_pipeline.pipeline.records import read_record
from csts_pipeline.pipeline.schemas import CAPTIONS, EMBEDDINGS
from csts_pipeline.pipeline.shards import list_shards, read_shards
from csts_pipeline.stages.embed import encoder
from csts_pipeline.stages.embed import stage as embed
from tests.conftest import write_manifest


@pytest.fixture
def dataset(tmp_path: Path, sample_dataset: tuple[Path, Path]) -> tuple[Path, Path]:
    """A private copy of the sample, so tests may damage it."""
    captions, images = sample_dataset
    shutil.copytree(images, tmp_path / "images")
    shutil.copy(captions, tmp_path / "captions.json")
    return tmp_path / "captions.json", tmp_path / "images"


def _manifest(tmp_path: Path, dataset: tuple[Path, Path], **embed_config):
    return load_manifest(write_manifest(tmp_path, *dataset, embed={"images_per_shard": 100, **embed_config}))


def test_embed_writes_unit_vectors_for_every_image(tmp_path: Path, dataset):
    manifest = _manifest(tmp_path, dataset)
    record = embed.run(manifest)
    table = read_shards(manifest.work_dir / "embed" / EMBEDDINGS)
    assert record["counts"]["images_embedded"] == table.num_rows == 240
    assert len(list_shards(manifest.work_dir / "embed" / EMBEDDINGS)) == 3
    assert table.schema.field("embedding").type.list_size == 64
    vectors = np.stack(table.column("embedding").to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert table.column("image_id").to_pylist() == sorted(table.column("image_id").to_pylist())
    assert read_record(manifest.work_dir / "embed")["params"]["model"] == "csts-tiny-clip"
    assert read_shards(manifest.work_dir / "embed" / CAPTIONS).num_rows == 1200
    assert set(record["output_files"]) == {f"{EMBEDDINGS}/part-0000{i}.parquet" for i in range(3)} | {
        f"{CAPTIONS}/part-00000.parquet"
    }


@pytest.mark.slow
def test_workers_and_batch_size_do_not_change_embeddings(tmp_path: Path, dataset):
    first = _manifest(tmp_path / "a", dataset, num_workers=0, batch_size=7)
    second = _manifest(tmp_path / "b", dataset, num_workers=2, batch_size=64)
    embed.run(first)
    embed.run(second)
    a = read_shards(first.work_dir / "embed" / EMBEDDINGS).column("embedding").to_pylist()
    b = read_shards(second.work_dir / "embed" / EMBEDDINGS).column("embedding").to_pylist()
    np.testing.assert_allclose(np.array(a), np.array(b), atol=1e-5)


def test_corrupt_images_are_skipped_and_listed(tmp_path: Path, dataset):
    images = dataset[1]
    victim = sorted(images.glob("*.jpg"))[5]
    victim.write_bytes(b"not a jpeg at all")
    manifest = _manifest(tmp_path, dataset)
    record = embed.run(manifest)
    assert record["counts"]["images_embedded"] == 239
    assert record["counts"]["images_skipped"] == 1
    [skipped] = record["skipped_images"]
    assert skipped["file_name"] == victim.name and "unreadable image" in skipped["reason"]


def test_rerun_with_same_inputs_is_a_noop_and_force_recomputes(tmp_path: Path, dataset):
    manifest = _manifest(tmp_path, dataset)
    embed.run(manifest)
    stamps = {p: p.stat().st_mtime_ns for p in list_shards(manifest.work_dir / "embed" / EMBEDDINGS)}
    assert embed.run(manifest)["status"] == "up-to-date"
    assert {p: p.stat().st_mtime_ns for p in list_shards(manifest.work_dir / "embed" / EMBEDDINGS)} == stamps
    record = embed.run(manifest, force=True)
    assert record["status"] == "done" and record["resumed"] is False


def test_a_crashed_run_resumes_from_its_finished_shards(tmp_path: Path, dataset, monkeypatch):
    manifest = _manifest(tmp_path, dataset)  # 3 shards of 100 images; batches of 16 straddle the boundaries
    real = encoder.embed_batches
    requested: list[int] = []

    def crash_inside_second_shard(encoder, paths, *args, **kwargs):
        requested.append(len(paths))
        yielded = 0
        for batch in real(encoder, paths, *args, **kwargs):
            if yielded > 200:  # shard 1 is complete, so shard 0's write has been reported
                raise KeyboardInterrupt("simulated crash")
            yielded += len(batch[0]) + len(batch[2])
            yield batch

    monkeypatch.setattr(encoder, "embed_batches", crash_inside_second_shard)
    with pytest.raises(KeyboardInterrupt):
        embed.run(manifest)
    assert not (manifest.work_dir / "embed").exists()  # nothing committed yet
    staging = staging_folder(embed.EmbedStage(manifest))
    folder = staging / EMBEDDINGS
    assert [p.name for p in list_shards(folder)] == ["part-00000.parquet", "part-00001.parquet"]
    assert not list(staging.rglob(".*.tmp"))
    first_stamp = (folder / "part-00000.parquet").stat().st_mtime_ns

    requested.clear()
    monkeypatch.setattr(
        encoder, "embed_batches", lambda e, paths, *a, **k: (requested.append(len(paths)), real(e, paths, *a, **k))[1]
    )
    record = embed.run(manifest)
    # shard 0 was reported done; shard 1 too unless its write was still in flight at the crash
    assert record["resumed"] is True and record["units_reused"] in (1, 2)
    assert requested == [240 - 100 * record["units_reused"]]  # one loader over the unfinished shards only
    folder = manifest.work_dir / "embed" / EMBEDDINGS
    assert (folder / "part-00000.parquet").stat().st_mtime_ns == first_stamp
    assert record["counts"]["images_embedded"] == 240 and not staging.exists()
    resumed = read_shards(folder)
    assert resumed.column("image_id").to_pylist() == sorted(resumed.column("image_id").to_pylist())


def test_a_failed_background_write_stops_the_run(tmp_path: Path, dataset, monkeypatch):
    """A shard write that fails in the writer thread is raised in the stage, not lost; finished shards stay."""
    manifest = _manifest(tmp_path, dataset)
    real = encoder.write_table

    def disk_full_on_second_shard(table, path):
        if path.name == "part-00001.parquet":
            raise OSError(28, "No space left on device")
        real(table, path)

    monkeypatch.setattr(encoder, "write_table", disk_full_on_second_shard)
    with pytest.raises(OSError, match="No space left"):
        embed.run(manifest)
    staging = staging_folder(embed.EmbedStage(manifest))
    assert [p.name for p in list_shards(staging / EMBEDDINGS)] == ["part-00000.parquet"]
    assert not (manifest.work_dir / "embed").exists()


def test_shards_match_a_single_in_memory_pass(tmp_path: Path, dataset):
    """Cutting one loader's batches into shards loses, duplicates and reorders nothing."""
    manifest = _manifest(tmp_path, dataset, batch_size=16, images_per_shard=37)
    embed.run(manifest)
    table = read_shards(manifest.work_dir / "embed" / EMBEDDINGS)
    assert len(list_shards(manifest.work_dir / "embed" / EMBEDDINGS)) == 7
    clip = encoder.load_clip(manifest.embed, torch.device("cpu"))
    paths = sorted(dataset[1].glob("*.jpg"))
    vectors = [
        v for _, v, _ in encoder.embed_batches(clip, paths, device=torch.device("cpu"), batch_size=240, num_workers=0)
    ]
    names = table.column("file_name").to_pylist()
    assert names == [p.name for p in paths]
    np.testing.assert_allclose(
        np.stack(table.column("embedding").to_numpy(zero_copy_only=False)), vectors[0], atol=1e-5
    )


def test_changed_parameters_start_afresh(tmp_path: Path, dataset):
    manifest = _manifest(tmp_path, dataset)
    embed.run(manifest)
    changed = _manifest(tmp_path, dataset, images_per_shard=120)
    record = embed.run(changed)
    assert record["status"] == "done"
    assert len(list_shards(changed.work_dir / "embed" / EMBEDDINGS)) == 2
    assert json.loads((changed.work_dir / "embed" / "_stage.json").read_text())["params"]["images_per_shard"] == 120


def test_unknown_model_and_missing_config_are_user_errors(tmp_path: Path, dataset):
    manifest = _manifest(tmp_path, dataset)
    manifest.embed.model_config_path = None
    manifest.embed.model = "ViT-Nonexistent"
    with pytest.raises(UserError, match="unknown open_clip model 'ViT-Nonexistent'"):
        embed.run(manifest)
    manifest.embed.model_config_path = tmp_path / "absent.json"
    with pytest.raises(UserError, match="model config not found"):
        embed.run(manifest)


@pytest.mark.slow
@pytest.mark.parametrize("decode", ["workers", "device"])
def test_the_ray_data_steps_write_the_local_executors_shards(tmp_path: Path, dataset, decode: str):
    """embed's batch pipeline (what the Ray executor hands to Ray Data), run step by step here: decode, then the
    model actor built from a pickled stage, then `collect` per unit from rows in scrambled order. The shards equal
    the local executor's, an unreadable image's row and metadata included."""
    sorted(dataset[1].glob("*.jpg"))[105].write_bytes(b"not a jpeg")
    manifest = _manifest(tmp_path, dataset, decode=decode, batch_size=32)
    embed.run(manifest)
    stage = embed.EmbedStage(manifest)
    stage.setup()
    units = stage.plan().units
    pipeline = stage.batch_pipeline(units, tmp_path / "staging")
    decode_step, model_step = pipeline.steps
    assert not decode_step.stateful and model_step.stateful
    actor = model_step.fn(*pickle.loads(pickle.dumps(model_step.args)))
    n = len(pipeline.rows["unit"])
    out = [actor(decode_step.fn({k: v[lo : lo + 32] for k, v in pipeline.rows.items()})) for lo in range(0, n, 32)]
    rows = {k: np.concatenate([batch[k] for batch in out])[::-1] for k in out[0]}
    for index, unit in enumerate(units):
        mine = rows["unit"] == index
        stats = pipeline.collect(unit, {k: v[mine] for k, v in rows.items()}, tmp_path / "staging")
        assert stats["embedded"] == unit.size - (index == 1)
        local = pq.read_table(manifest.work_dir / "embed" / unit.key)
        assert pq.read_table(tmp_path / "staging" / unit.key).equals(local, check_metadata=True)
