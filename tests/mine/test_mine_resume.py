"""mine killed mid-search resumes: the built index and the finished query blocks are kept, the rest searched."""

from pathlib import Path

import faiss
import numpy as np
import pytest

from csts_pipeline.pipeline.manifest import load_manifest
from csts_pipeline.pipeline.shards import list_shards, read_shards
from csts_pipeline.stages.mine import ann, search, stage
from tests.conftest import write_manifest
from tests.frame.test_commit import cli
from tests.mine.test_mine_ann import _clustered, _embed_folder, _rows

CONFIG = {"index": "ivf_pq", "k": 8, "recall_sample": 200, "query_batch": 700, "rerank": 8}


def _manifest(folder: Path) -> Path:
    path = write_manifest(folder, folder / "c.json", folder, mine=CONFIG)
    _embed_folder(folder / "work", _clustered(3000, dim=32, clusters=40))
    return path


@pytest.mark.slow
def test_a_mine_killed_mid_search_resumes_from_its_index_and_finished_blocks(tmp_path: Path, monkeypatch):
    manifest_path = _manifest(tmp_path)
    killed = cli("mine", "--manifest", manifest_path, failpoint="mine:knn-block:700")
    assert killed.returncode == -9, killed.stderr
    knn = tmp_path / "work" / ".mine.next" / search.KNN_DIR
    assert [line.split()[0] for line in (knn / search.BLOCKS_DONE).read_text().splitlines()] == ["0", "700"]
    assert (knn / "index.faiss").is_file() and (knn / "vectors.npy").is_file()

    index = faiss.read_index(str(knn / "index.faiss"))
    faiss.extract_index_ivf(index).nprobe = 1  # the rerun must search at the record's nprobe, not FAISS's copy
    faiss.write_index(index, str(knn / "index.faiss"))
    searched = []
    original = search.search_block
    monkeypatch.setattr(search, "build_searcher", lambda *args: pytest.fail("the saved index is rebuilt"))
    nprobes = []

    def search_block(searcher, queries, rows, k):
        searched.append(rows)
        nprobes.append(faiss.extract_index_ivf(searcher.index).nprobe)
        return original(searcher, queries, rows, k)

    monkeypatch.setattr(search, "search_block", search_block)
    manifest = load_manifest(manifest_path)
    finished = set(ann.rows_by_list(index)[:1400].tolist())  # blocks go list by list: the killed run's two
    resumed = stage.run(manifest)
    assert [len(rows) for rows in searched] == [700, 700, 200] and resumed["search"]["blocks_resumed"] == 2
    assert sorted(np.concatenate(searched).tolist()) == sorted(set(range(3000)) - finished)
    assert set(nprobes) == {resumed["search"]["nprobe"]}
    assert resumed["search"]["search_seconds"] > 0  # the killed run's blocks counted too
    assert resumed["search"]["index"] == "ivf_pq" and resumed["search"]["recall_at_k"] >= 0.95
    assert not (tmp_path / "work" / ".mine.next").exists()
    pairs = read_shards(tmp_path / "work" / "mine" / "image_pairs")

    monkeypatch.undo()
    whole = stage.run(manifest, force=True)  # the same seeds build the same index: the same pairs, uninterrupted
    assert _rows(read_shards(tmp_path / "work" / "mine" / "image_pairs")) == _rows(pairs)
    assert whole["counts"] == resumed["counts"] and whole["search"]["nprobe"] == resumed["search"]["nprobe"] > 1


@pytest.mark.slow
def test_a_mine_killed_while_expanding_candidates_resumes_without_searching_again(tmp_path: Path, monkeypatch):
    manifest_path = _manifest(tmp_path)
    killed = cli("mine", "--manifest", manifest_path, failpoint="mine:after-unit")
    assert killed.returncode == -9, killed.stderr
    staging = tmp_path / "work" / ".mine.next"
    assert not (staging / search.KNN_DIR).exists()  # the neighbour lists went once the image pairs were written

    monkeypatch.setattr(search, "build_searcher", lambda *args: pytest.fail("the index is built again"))
    monkeypatch.setattr(search, "search_block", lambda *args: pytest.fail("a block is searched again"))
    manifest = load_manifest(manifest_path)
    resumed = stage.run(manifest)
    assert resumed["units_reused"] == 1 and resumed["units"] > 1
    assert resumed["search"]["recall_at_k"] >= 0.95 and resumed["search"]["search_seconds"] > 0  # the first run's
    pairs = read_shards(tmp_path / "work" / "mine" / "image_pairs")
    candidates = read_shards(tmp_path / "work" / "mine" / "candidates")

    monkeypatch.undo()
    whole = stage.run(manifest, force=True)
    assert _rows(read_shards(tmp_path / "work" / "mine" / "image_pairs")) == _rows(pairs)
    assert read_shards(tmp_path / "work" / "mine" / "candidates").equals(candidates)
    assert whole["counts"] == resumed["counts"]


@pytest.mark.slow
def test_finished_blocks_cut_with_another_query_batch_are_searched_again(tmp_path: Path):
    manifest_path = _manifest(tmp_path)
    killed = cli("mine", "--manifest", manifest_path, failpoint="mine:knn-block:700")
    assert killed.returncode == -9, killed.stderr
    manifest = load_manifest(manifest_path)
    rebatched = manifest.model_copy(update={"mine": manifest.mine.model_copy(update={"query_batch": 500})})
    resumed = stage.run(rebatched)  # keys 0 and 700 name other rows in blocks of 500: none is kept
    assert resumed["search"]["blocks_resumed"] == 0
    pairs = read_shards(tmp_path / "work" / "mine" / "image_pairs")
    assert len(list_shards(tmp_path / "work" / "mine" / "image_pairs")) == 6  # 3,000 rows in blocks of 500

    whole = stage.run(rebatched, force=True)
    assert _rows(read_shards(tmp_path / "work" / "mine" / "image_pairs")) == _rows(pairs)
    assert whole["counts"] == resumed["counts"]
