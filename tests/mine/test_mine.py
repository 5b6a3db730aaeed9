import pickle
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from csts_pipeline.pipeline.cluster import SerialTasks
from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.executor import LocalExecutor
from csts_pipeline.pipeline.manifest import load_manifest
from csts_pipeline.pipeline.schemas import CAPTIONS, EMBEDDINGS
from csts_pipeline.pipeline.shards import list_shards, read_shards, write_table
from csts_pipeline.stages.embed.encoder import embeddings_table
from csts_pipeline.stages.mine import knn
from csts_pipeline.stages.mine import pairs as mine_pairs
from csts_pipeline.stages.mine import stage as mine
from tests.conftest import contents, write_manifest


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    vectors = rng.standard_normal((n, d)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.mark.parametrize("backend", ["faiss", "torch"])
def test_neighbours_equal_brute_force_top_k(backend: str):
    vectors = _unit(np.random.default_rng(0), 500, 32)
    neighbours, scores = knn.exact_knn(vectors, k=10, query_batch=128, backend=backend)
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -np.inf)
    expected = np.argsort(-sims, axis=1, kind="stable")[:, :10]
    np.testing.assert_array_equal(neighbours, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(sims, expected, axis=1), atol=1e-5)
    assert not np.any(neighbours == np.arange(500)[:, None])


def test_torch_search_over_many_pieces_and_chunks_equals_brute_force(monkeypatch):
    """The base split in pieces of 200 rows (shards of 150 joined), searched in chunks of 96 columns: the merged
    top-k is the brute-force one."""
    monkeypatch.setattr(knn, "PIECE_ROWS", 200)
    monkeypatch.setattr(knn, "SCORE_BYTES", 4 * 128 * 96)
    vectors = _unit(np.random.default_rng(2), 1000, 16)
    searcher = knn.TorchSearch(16)
    for lo in range(0, 1000, 150):
        searcher.add(vectors[lo : lo + 150])
    _, found = searcher.search(vectors[:128], 7)
    sims = vectors[:128] @ vectors.T
    np.testing.assert_array_equal(found, np.argsort(-sims, axis=1, kind="stable")[:, :7])
    assert [len(piece) for piece in searcher.pieces] == [300, 300, 300, 100]


def test_group_top_k_finds_the_best_columns_in_one_group_and_in_the_tail():
    scores = torch.rand(3, 64 * knn.GROUP + 5)
    scores[0, 70:75] = torch.tensor([5.0, 4.0, 3.0, 2.0, 1.5])  # all five best in one group
    scores[1, -1] = 9.0  # the best after the last whole group
    scores[2, :: knn.GROUP] = 2.0  # a tie of group maxima
    values, columns = knn.top_k(scores, 5)
    expected = torch.topk(scores, 5, dim=1)
    torch.testing.assert_close(values, expected.values)
    assert columns[0].tolist() == [70, 71, 72, 73, 74] and columns[1, 0] == scores.shape[1] - 1
    assert set(columns[2].tolist()) <= set(range(0, scores.shape[1], knn.GROUP))


@pytest.mark.parametrize("backend", ["faiss", "torch"])
def test_self_match_is_removed_by_index_even_among_duplicate_vectors(backend: str):
    vectors = _unit(np.random.default_rng(1), 20, 8)
    vectors[5] = vectors[6] = vectors[7]  # three identical rows: self may not come first
    neighbours, _ = knn.exact_knn(vectors, k=5, backend=backend)
    assert not np.any(neighbours == np.arange(20)[:, None])
    assert set(neighbours[5, :2]) == {6, 7} and set(neighbours[7, :2]) == {5, 6}


@pytest.mark.parametrize("counted", [True, False])
def test_k_must_be_below_the_number_of_images(tmp_path: Path, counted: bool):
    """Checked once, when mine plans: from embed's count, or from its shards when the record has none."""
    manifest = _manifest(tmp_path, k=40)
    _fake_embed_stage(manifest.work_dir)
    if not counted:
        OutputFolder("embed", manifest.work_dir / "embed", {"fake": True}, {}).record_in_place({})
    with pytest.raises(UserError, match=r"mine\.k=40 needs more than 40 embedded images; there are 40"):
        mine.MineStage(manifest).plan()
    assert not (manifest.work_dir / "mine").exists()


def test_unordered_pairs_keep_each_symmetric_pair_once_with_its_best_rank():
    vectors = _unit(np.random.default_rng(2), 60, 16)
    image_ids = np.arange(100, 160, dtype=np.int64)
    neighbours, scores = knn.exact_knn(vectors, k=6)
    ordered = mine_pairs.image_pairs(image_ids, neighbours, scores, "ordered")
    unordered = mine_pairs.image_pairs(image_ids, neighbours, scores, "unordered")
    assert ordered.num_rows == 60 * 6
    directed = set(zip(ordered.column("image_id_1").to_pylist(), ordered.column("image_id_2").to_pylist()))
    expected = {(min(a, b), max(a, b)) for a, b in directed}
    got = list(zip(unordered.column("image_id_1").to_pylist(), unordered.column("image_id_2").to_pylist()))
    assert len(got) == len(set(got)) == len(expected) and set(got) == expected
    assert all(a < b for a, b in got)
    best = {}
    for a, b, rank in zip(*(ordered.column(c).to_pylist() for c in ("image_id_1", "image_id_2", "rank"))):
        key = (min(a, b), max(a, b))
        best[key] = min(best.get(key, 99), rank)
    assert dict(zip(got, unordered.column("rank").to_pylist())) == best


def test_expansion_is_the_cartesian_product_of_captions():
    # images 1..4 with 1, 2, 3 and 5 captions
    caption_image_ids = np.array([1, 2, 2, 3, 3, 3, 4, 4, 4, 4, 4])
    caption_ids = np.arange(500, 511)
    index = mine_pairs.CaptionIndex.build(np.array([4, 3, 2, 1]), caption_ids, caption_image_ids)
    pairs = pa.table(
        {
            "image_id_1": [1, 2, 3],
            "image_id_2": [4, 3, 4],
            "rank": pa.array([1, 1, 2], pa.int32()),
            "cosine": pa.array([0.9, 0.8, 0.7], pa.float32()),
        }
    )
    candidates = mine_pairs.expand(pairs, index)
    assert candidates.num_rows == 1 * 5 + 2 * 3 + 3 * 5
    rows = candidates.to_pylist()
    owner = dict(zip(caption_ids.tolist(), caption_image_ids.tolist()))
    expected = {
        (c1, c2)
        for i1, i2 in [(1, 4), (2, 3), (3, 4)]
        for c1 in caption_ids[caption_image_ids == i1]
        for c2 in caption_ids[caption_image_ids == i2]
    }
    assert {(r["caption_id_1"], r["caption_id_2"]) for r in rows} == expected
    for r in rows:
        assert owner[r["caption_id_1"]] == r["image_id_1"] != r["image_id_2"] == owner[r["caption_id_2"]]
        assert r["pair_id"] == (r["caption_id_1"] << 32) | r["caption_id_2"]
    assert [r["image_cosine"] for r in rows if r["image_id_1"] == 2] == pytest.approx([0.8] * 6)


def _fake_embed_stage(
    work_dir: Path, n_images: int = 40, captions_per_image: int = 5, vectors: np.ndarray | None = None
) -> None:
    """An embed folder as the embed stage leaves it (docs/schemas.md), with random unit vectors."""
    rng = np.random.default_rng(3)
    image_ids = np.arange(1, n_images + 1, dtype=np.int64) * 3
    folder = work_dir / "embed"
    vectors = _unit(rng, n_images, 16) if vectors is None else vectors
    write_table(
        embeddings_table(image_ids, [f"{i}.jpg" for i in image_ids], vectors),
        folder / EMBEDDINGS / "part-00000.parquet",
    )
    caption_image_ids = np.repeat(image_ids, captions_per_image)
    write_table(
        pa.table(
            {
                "caption_id": np.arange(len(caption_image_ids), dtype=np.int64) + 7,
                "image_id": caption_image_ids,
                "caption": [f"caption {i}" for i in range(len(caption_image_ids))],
            }
        ),
        folder / CAPTIONS / "part-00000.parquet",
    )
    OutputFolder("embed", folder, {"fake": True}, {}).record_in_place({"images_embedded": n_images})


def _manifest(tmp_path: Path, **mine_config):
    return load_manifest(write_manifest(tmp_path, tmp_path / "c.json", tmp_path, mine=mine_config))


def test_mine_stage_counts_are_exact(tmp_path: Path):
    manifest = _manifest(tmp_path, k=4, candidates_per_shard=500)
    _fake_embed_stage(manifest.work_dir)
    record = mine.run(manifest)
    folder = manifest.work_dir / "mine"
    pairs = read_shards(folder / "image_pairs")
    candidates = read_shards(folder / "candidates")
    assert record["counts"]["image_pairs"] == pairs.num_rows
    assert 40 * 4 / 2 <= pairs.num_rows <= 40 * 4
    assert record["counts"]["candidate_pairs"] == candidates.num_rows == pairs.num_rows * 25
    assert len(list_shards(folder / "candidates")) == record["counts"]["candidate_shards"] > 1
    assert np.all(candidates.column("image_id_1").to_numpy() != candidates.column("image_id_2").to_numpy())
    assert len(set(candidates.column("pair_id").to_pylist())) == candidates.num_rows
    assert read_shards(folder / CAPTIONS).num_rows == 200


def test_mine_rerun_is_a_noop_and_changed_k_recomputes(tmp_path: Path):
    manifest = _manifest(tmp_path, k=4)
    _fake_embed_stage(manifest.work_dir)
    mine.run(manifest)
    assert mine.run(manifest)["status"] == "up-to-date"
    manifest.mine.k = 6
    assert mine.run(manifest)["params"]["k"] == 6


def test_mine_without_embed_output_says_what_to_run(tmp_path: Path):
    with pytest.raises(UserError, match="run `csts-pipeline embed` first"):
        mine.run(_manifest(tmp_path))


def test_mine_without_faiss_names_the_extras(tmp_path: Path, monkeypatch):
    _fake_embed_stage(tmp_path / "work")
    monkeypatch.setitem(sys.modules, "faiss", None)  # as if neither faiss-cpu nor faiss-gpu-cu12 were installed
    with pytest.raises(UserError, match=r"csts-pipeline\[cpu\].*csts-pipeline\[gpu\].*--knn torch"):
        mine.run(_manifest(tmp_path, k=4, knn="faiss"))
    assert not (tmp_path / "work" / "mine").exists()
    assert mine.run(_manifest(tmp_path, k=4, knn="torch"))["status"] == "done"


class _ClusterTasks(SerialTasks):
    """`ClusterStage.tasks` as Ray runs them, in this process: `shared` arrives through a pickle and read-only (as from
    the object store), and FAISS and torch start on one thread (a 1-CPU Ray task) where the driver's loop used
    every core."""

    distributed = True

    def map(self, fn, items, shared, resources):
        import faiss

        base, *rest = pickle.loads(pickle.dumps(shared))
        base.setflags(write=False)
        threads = faiss.omp_get_max_threads(), torch.get_num_threads()
        faiss.omp_set_num_threads(1)
        torch.set_num_threads(1)
        try:
            yield from super().map(fn, items, (base, *rest), resources)
        finally:
            faiss.omp_set_num_threads(threads[0])
            torch.set_num_threads(threads[1])


@pytest.mark.parametrize("backend", ["faiss", "torch"])
def test_exact_search_as_tasks_writes_the_tables_of_the_local_loop(tmp_path: Path, backend: str):
    """The Ray executor's path (one task per query block over the shared base) against the driver's loop, with
    exact ties (every vector appears twice, rounded to a coarse grid) and blocks large enough that BLAS on one
    thread rounds differently from BLAS on two: the tasks use the driver's thread count."""
    rng = np.random.default_rng(4)
    vectors = np.repeat(np.round(_unit(rng, 1500, 128) * 8) / 8, 2, axis=0)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    records = {}
    for name, tasks in (("loop", SerialTasks()), ("tasks", _ClusterTasks())):
        manifest = _manifest(tmp_path / name, k=8, knn=backend, query_batch=2048, candidates_per_shard=9000)
        _fake_embed_stage(manifest.work_dir, 3000, captions_per_image=1, vectors=vectors.astype(np.float32))
        stage = mine.MineStage(manifest)
        stage.tasks = tasks
        records[name] = LocalExecutor(progress=False).run(stage)
    assert records["tasks"]["search"]["query_blocks"] == 2
    assert contents(tmp_path / "tasks" / "work", ("mine",)) == contents(tmp_path / "loop" / "work", ("mine",))
