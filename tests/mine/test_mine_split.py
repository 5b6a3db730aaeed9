"""mine with the base split across 2 Ray actors (a local Ray of 2 CPUs): the same neighbours as one process."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from csts_pipeline.pipeline.manifest import load_manifest
from csts_pipeline.pipeline.shards import read_shards
from csts_pipeline.stages.mine import stage as mine
from csts_pipeline.stages.mine.base_split import merge_top_k
from tests.conftest import write_manifest
from tests.mine.test_mine_ann import _clustered, _embed_folder, _rows


def test_merge_keeps_the_best_of_every_part():
    scores = [np.array([[0.9, 0.5, -np.inf]]), np.array([[0.7, 0.6, 0.1]])]
    ids = [np.array([[3, 1, -1]]), np.array([[10, 12, 11]])]
    merged_scores, merged_ids = merge_top_k(scores, ids, 3)
    assert merged_ids.tolist() == [[3, 10, 12]] and merged_scores.tolist() == [[0.9, 0.7, 0.6]]


@pytest.mark.slow
def test_split_across_two_ray_workers_matches_one_process(tmp_path: Path, ray_session):
    vectors = _clustered(3000, dim=32, clusters=40)
    config = {"index": "ivf", "k": 8, "recall_sample": 300, "query_batch": 700, "ivf_lists": 50}
    (local, local_table), (split, split_table) = _local_and_split(tmp_path, vectors, config)
    local_pairs, split_pairs = _rows(local_table), _rows(split_table)
    assert split["search"]["parts"] == 2 and "parts" not in local["search"]
    assert split["search"]["tried"] == local["search"]["tried"]  # the same recall at every nprobe
    assert split["search"]["recall_at_k"] == local["search"]["recall_at_k"] >= 0.95
    assert [row[:2] for row in split_pairs] == [row[:2] for row in local_pairs]  # the same neighbours (a
    # near-tie of two cosines may swap their ranks: the merge orders ties by row, FAISS by list)
    np.testing.assert_allclose([row[3] for row in split_pairs], [row[3] for row in local_pairs], atol=1e-5)


@pytest.mark.slow
def test_split_ivf_pq_re_ranks_in_every_part_and_loses_no_recall(tmp_path: Path, ray_session):
    """Each part searches its own codes (the same trained quantiser and codebooks, so the same approximate scores)
    for k x rerank candidates and re-ranks them from its own vector file: the union holds every candidate the whole
    index would give, so the merged recall is at least the single process's at every nprobe, and cosines are exact."""
    vectors = _clustered(3000, dim=32, clusters=40)
    config = {"index": "ivf_pq", "k": 8, "recall_sample": 300, "query_batch": 700, "ivf_lists": 50, "rerank": 4}
    (local, _), (split, split_pairs) = _local_and_split(tmp_path, vectors, config)
    assert split["search"]["parts"] == 2 and split["search"]["budget"]["factory"] == "IVF50,PQ16x4fsr"
    for local_step, split_step in zip(local["search"]["tried"], split["search"]["tried"]):
        assert split_step["nprobe"] == local_step["nprobe"] and split_step["recall"] >= local_step["recall"]
    assert split["search"]["recall_at_k"] >= 0.95
    ids = (np.arange(3000) * 7919) % 100_003
    row = {image: r for r, image in enumerate(ids)}
    first = np.array([row[i] for i in split_pairs.column("image_id_1").to_numpy()])
    second = np.array([row[i] for i in split_pairs.column("image_id_2").to_numpy()])
    exact = np.einsum("ij,ij->i", vectors[first], vectors[second])  # re-ranked in the parts: exact cosines
    np.testing.assert_allclose(split_pairs.column("cosine").to_numpy(), exact, atol=1e-5)


def _local_and_split(tmp_path: Path, vectors: np.ndarray, config: dict) -> list[tuple[dict, pa.Table]]:
    """(record, image pairs) of mine over `vectors` in one process, then split in 2 parts on the local Ray cluster."""
    from csts_pipeline.pipeline.ray_executor import RayExecutor

    runs = []
    for name, parts in (("local", 1), ("split", 2)):
        work = tmp_path / name
        manifest = load_manifest(write_manifest(work, work / "c.json", work, mine=config | {"parts": parts}))
        _embed_folder(manifest.work_dir, vectors)
        executor = mine.LocalExecutor() if parts == 1 else RayExecutor(progress=False)
        record = executor.run(mine.MineStage(manifest), force=True)
        runs.append((record, read_shards(manifest.work_dir / "mine" / "image_pairs")))
    return runs
