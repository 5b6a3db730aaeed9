"""Approximate search with measured recall, and the streamed (block by block) image pairs."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from csts_pipeline.pipeline.commit import OutputFolder
from csts_pipeline.pipeline.manifest import MineConfig, load_manifest
from csts_pipeline.pipeline.schemas import CAPTIONS, EMBEDDINGS
from csts_pipeline.pipeline.shards import read_shards, write_table
from csts_pipeline.stages.embed.encoder import embeddings_table
from csts_pipeline.stages.mine import ann, knn
from csts_pipeline.stages.mine import pairs as mine_pairs
from csts_pipeline.stages.mine import stage as mine
from csts_pipeline.stages.mine.vectors import EmbeddingShards
from tests.conftest import write_manifest


def _clustered(n: int, dim: int = 16, clusters: int = 20, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    vectors = centres[rng.integers(0, clusters, n)] + 0.5 * rng.standard_normal((n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _embed_folder(
    work_dir: Path, vectors: np.ndarray, per_shard: int = 300, captions_per_image: int = 2, dtype: str = "float32"
) -> None:
    """An embed output of the given vectors, in several shards (image ids not in row order), stored as `dtype`."""
    n = len(vectors)
    image_ids = (np.arange(n, dtype=np.int64) * 7919) % 100_003
    folder = work_dir / "embed"
    for shard, lo in enumerate(range(0, n, per_shard)):
        hi = min(n, lo + per_shard)
        table = embeddings_table(image_ids[lo:hi], [f"{i}.jpg" for i in image_ids[lo:hi]], vectors[lo:hi], dtype)
        write_table(table, folder / EMBEDDINGS / f"part-{shard:05d}.parquet")
    owners = np.repeat(image_ids, captions_per_image)
    ids = np.arange(len(owners), dtype=np.int64)
    captions = {"caption_id": ids, "image_id": owners, "caption": ["c"] * len(owners)}
    write_table(pa.table(captions), folder / CAPTIONS / "part-00000.parquet")
    OutputFolder("embed", folder, {"n": n}, {}).record_in_place({"images_embedded": n})


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table.column(name).to_pylist() for name in table.column_names)))


def _mine(tmp_path: Path, vectors: np.ndarray, **config) -> tuple[dict, Path]:
    manifest = load_manifest(write_manifest(tmp_path, tmp_path / "c.json", tmp_path, mine=config))
    if not (manifest.work_dir / "embed").exists():
        _embed_folder(manifest.work_dir, vectors)
    return mine.run(manifest, force=True), manifest.work_dir / "mine"


@pytest.mark.parametrize("mode", ["unordered", "ordered"])
def test_pairs_made_block_by_block_equal_the_whole_at_once(mode: str):
    vectors = _clustered(500)
    image_ids = np.random.default_rng(4).permutation(np.arange(1000, 1500, dtype=np.int64))
    neighbours, scores = knn.exact_knn(vectors, k=8)
    whole = mine_pairs.image_pairs(image_ids, neighbours, scores, mode)
    blocks = [
        mine_pairs.block_pairs(
            lo,
            neighbours[lo : lo + 64],
            scores=scores[lo : lo + 64],
            all_neighbours=neighbours,
            all_scores=scores,
            image_ids=image_ids,
            mode=mode,
        )
        for lo in range(0, 500, 64)
    ]
    assert _rows(pa.concat_tables(blocks)) == _rows(whole)


def test_missing_neighbours_are_skipped_and_one_sided_pairs_kept():
    image_ids = np.array([10, 20, 30], dtype=np.int64)
    neighbours = np.array([[1, -1], [0, 2], [-1, -1]])  # 0<->1 both ways, 1->2 one way
    scores = np.array([[0.9, 0], [0.9, 0.5], [0, 0]], dtype=np.float32)
    pairs = mine_pairs.image_pairs(image_ids, neighbours, scores, "unordered")
    assert _rows(pairs) == [(10, 20, 1, pytest.approx(0.9)), (20, 30, 2, pytest.approx(0.5))]


def test_exact_top_k_of_a_sample_streams_over_shards(tmp_path: Path):
    vectors = _clustered(700)
    _embed_folder(tmp_path, vectors, per_shard=123)
    shards = EmbeddingShards(tmp_path / "embed" / EMBEDDINGS)
    rows = np.array([0, 5, 122, 123, 699])
    truth = ann.exact_top_k(shards, rows, 10, block=100)
    neighbours, _ = knn.exact_knn(vectors, 10)
    assert ann.recall_at_k(truth, neighbours[rows]) == 1.0
    assert ann.recall_at_k(neighbours[rows][:, ::-1], neighbours[rows]) == 1.0  # order does not matter
    assert ann.recall_at_k(np.full((5, 10), -1), neighbours[rows]) == 0.0


def test_auto_is_exact_below_the_threshold_and_ivf_above():
    config = MineConfig(exact_below=1000)
    assert ann.resolve_index(config, 999) == "exact"
    assert ann.resolve_index(config, 1000) == "ivf"
    assert ann.resolve_index(MineConfig(index="hnsw"), 10) == "hnsw"


@pytest.mark.parametrize("index", ["ivf", "hnsw"])
def test_approximate_mine_reaches_the_recall_target_and_records_it(tmp_path: Path, index: str):
    vectors = _clustered(2000)
    record, folder = _mine(tmp_path, vectors, index=index, k=8, recall_sample=300, query_batch=512)
    search = record["search"]
    assert search["index"] == index and search["recall_at_k"] >= 0.95 and search["recall_sample"] == 300
    parameter = "nprobe" if index == "ivf" else "efSearch"
    assert search[parameter] == search["tried"][-1][parameter]
    assert all(step["recall"] < 0.95 for step in search["tried"][:-1])
    assert record["params"]["index"] == index
    pairs = read_shards(folder / "image_pairs")
    first, second = pairs.column("image_id_1").to_numpy(), pairs.column("image_id_2").to_numpy()
    assert np.all(first < second) and len(set(zip(first, second))) == pairs.num_rows
    assert record["counts"]["candidate_pairs"] == read_shards(folder / "candidates").num_rows == pairs.num_rows * 4


def test_a_higher_target_raises_nprobe(tmp_path: Path):
    vectors = _clustered(2000, clusters=5, dim=32)
    low, _ = _mine(tmp_path, vectors, index="ivf", k=16, recall_target=0.5, ivf_lists=40)
    high, _ = _mine(tmp_path, vectors, index="ivf", k=16, recall_target=1.0, ivf_lists=40)
    assert high["search"]["nprobe"] > low["search"]["nprobe"]
    assert high["search"]["recall_at_k"] == 1.0 or high["search"]["nprobe"] == 40


def test_exact_mine_is_the_same_whatever_the_query_blocks(tmp_path: Path):
    vectors = _clustered(900)
    _, folder = _mine(tmp_path, vectors, index="exact", k=6, query_batch=8192)
    one_block = [_rows(read_shards(folder / table)) for table in ("image_pairs", "candidates")]
    record, folder = _mine(tmp_path, vectors, index="exact", k=6, query_batch=100)
    assert record["search"]["index"] == "exact" and "index" not in record["params"]
    assert [_rows(read_shards(folder / table)) for table in ("image_pairs", "candidates")] == one_block


TOPICS = [
    "A brown dog runs across a grassy park chasing a ball.",
    "A red car is parked on a busy city street.",
    "Two people are cooking dinner together in a small kitchen.",
    "A sailboat floats on calm blue water under a clear sky.",
]


def test_mine_by_text_pairs_images_whose_captions_agree(tmp_path: Path):
    """Image vectors are noise; the captions fall in four topics, so text neighbours stay within a topic."""
    manifest = load_manifest(write_manifest(tmp_path, tmp_path / "c.json", tmp_path, mine={"k": 3, "by": "text"}))
    n = 40
    image_ids = np.arange(n, dtype=np.int64) + 500
    folder = manifest.work_dir / "embed"
    write_table(
        embeddings_table(image_ids, [f"{i}.jpg" for i in image_ids], _clustered(n, seed=9)),
        folder / EMBEDDINGS / "part-00000.parquet",
    )
    owners = np.repeat(image_ids, 2)
    texts = [TOPICS[(owner - 500) % 4] if j == 0 else f"Photo {owner}." for owner, j in zip(owners, [0, 1] * n)]
    captions = {"caption_id": np.arange(2 * n, dtype=np.int64), "image_id": owners, "caption": texts}
    write_table(pa.table(captions), folder / CAPTIONS / "part-00000.parquet")
    OutputFolder("embed", folder, {"n": n}, {}).record_in_place({"images_embedded": n})
    record = mine.run(manifest)
    assert record["search"]["by"] == "text" and record["params"]["by"] == "text"
    pairs = read_shards(manifest.work_dir / "mine" / "image_pairs")
    topic_1 = (pairs.column("image_id_1").to_numpy() - 500) % 4
    topic_2 = (pairs.column("image_id_2").to_numpy() - 500) % 4
    assert pairs.num_rows >= n * 3 / 2 and np.all(topic_1 == topic_2)
    assert not {"_knn", "_text"} & {path.name for path in (manifest.work_dir / "mine").iterdir()}


class _RecallFromNprobe:
    """A searcher whose recall is `curve[nprobe]`: that share of the queries gets its exact neighbours, the rest
    nothing."""

    def __init__(self, vectors: np.ndarray, curve: dict[int, float]):
        self.vectors, self.curve, self.nprobe = vectors, curve, 1
        self.index = type("Index", (), {"nlist": 64})()

    def set_parameter(self, name: str, value: int) -> None:
        self.nprobe = value

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores, found = torch.topk(torch.from_numpy(queries @ self.vectors.T), k, dim=1)
        found[round(self.curve[self.nprobe] * len(queries)) :] = -1
        return scores.numpy(), found.numpy()


RISING = {1: 0.2, 2: 0.4, 4: 0.6, 8: 0.96}
STALLING = {1: 0.5, 2: 0.6, 4: 0.68, 8: 0.72, 16: 0.74, 32: 0.75, 64: 0.75}


@pytest.mark.parametrize(
    ("curve", "chosen", "tried", "stalled"),
    [
        (RISING | {6: 0.95}, 6, [1, 2, 4, 8, 6], False),  # 3/4 of the value that reached the target also does
        (RISING | {6: 0.9}, 8, [1, 2, 4, 8, 6], False),  # it does not: back to the value that did
        (STALLING, 16, [1, 2, 4, 8, 16], True),  # gains halving twice: at most 0.76 to come, short of 0.95
    ],
)
def test_tuning_doubles_tries_three_quarters_and_stops_where_recall_stalls(
    tmp_path: Path, curve: dict[int, float], chosen: int, tried: list[int], stalled: bool
):
    vectors = _clustered(400)
    _embed_folder(tmp_path, vectors)
    searcher = _RecallFromNprobe(vectors, curve)
    config = MineConfig(index="ivf", k=8, recall_sample=200)
    record = ann.tune(searcher, "ivf", EmbeddingShards(tmp_path / "embed" / EMBEDDINGS), config)
    assert [step["nprobe"] for step in record["tried"]] == tried
    assert record["nprobe"] == chosen and searcher.nprobe == chosen
    assert record["recall_at_k"] == pytest.approx(curve[chosen], abs=1e-9)
    assert record.get("stalled", False) is stalled
