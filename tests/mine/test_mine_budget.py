"""mine under a memory budget: the index chosen, compressed search re-ranked exactly, the record."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import MineConfig
from csts_pipeline.pipeline.schemas import EMBEDDINGS
from csts_pipeline.pipeline.shards import read_shards, write_table
from csts_pipeline.stages.embed.encoder import embeddings_table
from csts_pipeline.stages.mine import ann, knn
from csts_pipeline.stages.mine import budget as budget_module
from csts_pipeline.stages.mine import rerank as rerank_module
from csts_pipeline.stages.mine.budget import GIB, estimate, ivf_lists, plan_index, training_rows
from csts_pipeline.stages.mine.rerank import StoredRows, VectorFile, rerank
from csts_pipeline.stages.mine.vectors import EmbeddingShards
from tests.mine.test_mine_ann import _clustered, _embed_folder, _mine


def test_the_budget_picks_the_most_accurate_index_that_fits():
    config = MineConfig(memory_budget=8)
    assert plan_index(config, 100_000, 512).kind == "exact"
    assert plan_index(config, 1_000_000, 512).kind == "ivf"
    assert plan_index(config.model_copy(update={"memory_budget": 5}), 2_000_000, 512).kind == "ivf_sq8"
    tight = plan_index(config, 10_000_000, 512)
    assert (tight.kind, tight.pq_m, tight.candidates) == ("ivf_pq", 256, 8 * 64)
    assert tight.factory == "IVF12649,PQ256x4fsr"
    sq8 = estimate("ivf_sq8", 10_000_000, 512, lists=12649, pq_m=None, config=config)
    assert tight.estimate["total"] <= 8 * GIB < sq8["total"]
    assert "ivf_sq8" in tight.reason and "does not fit" in tight.reason
    smaller = plan_index(config.model_copy(update={"memory_budget": 5}), 10_000_000, 512)
    assert smaller.kind == "ivf_pq" and smaller.pq_m < 256


def test_an_exact_base_on_the_gpu_is_not_counted_against_the_host_budget(monkeypatch):
    config = MineConfig(memory_budget=8, index="exact", knn="torch")
    with pytest.raises(UserError, match="exact"):  # 10M float32 vectors in this process: 19 GiB
        plan_index(config, 10_000_000, 512)
    on_gpu = plan_index(config, 10_000_000, 512, gpu=True)
    assert on_gpu.kind == "exact" and "base on the GPU" in on_gpu.reason
    assert on_gpu.estimate["index"] == 2 * budget_module.PIECE_ROWS * 512 * 4  # one piece in transit
    auto = MineConfig(memory_budget=8, knn="torch")
    assert plan_index(auto, 1_000_000, 512, gpu=True).kind == "ivf"  # `auto` still goes approximate past exact_below
    assert budget_module.base_on_gpu(config, "cuda:1") and not budget_module.base_on_gpu(config, "cpu")
    assert not budget_module.base_on_gpu(MineConfig(knn="faiss"), "cuda")
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert budget_module.base_on_gpu(config, "auto")


def test_list_count_is_sqrt_n_below_a_million_and_4_sqrt_n_from_there_with_an_hnsw_quantiser_past_32k_lists():
    config = MineConfig(memory_budget=64)
    for n, lists in [(3000, 55), (100_000, 316), (999_999, 1000), (1_000_000, 4000), (10_000_000, 12649)]:
        assert ivf_lists(n, None) == lists
    assert ivf_lists(1000, None) == 25 and ivf_lists(1_000_000, 50) == 50  # 39 points a list; as configured
    small = plan_index(config.model_copy(update={"index": "ivf"}), 999_999, 512)
    assert (small.quantizer, small.lists) == ("flat", 1000) and "quantizer" not in small.record(64)
    middle = plan_index(config.model_copy(update={"index": "ivf"}), 10_000_000, 512)
    assert (middle.quantizer, middle.factory) == ("flat", "IVF12649,Flat")  # one matrix product is quicker
    large = plan_index(config.model_copy(update={"index": "ivf", "memory_budget": 512}), 100_000_000, 512)
    assert (large.quantizer, large.factory) == ("hnsw", "IVF40000_HNSW32,Flat")
    assert large.record(512)["quantizer"] == "HNSW32"
    assert training_rows("ivf", 999_999, 1000) == 64_000  # as before below the cap
    assert training_rows("ivf", 10_000_000, 12649) == 32 * 12649  # capped: 32 a list
    assert budget_module.quantizer_bytes(32_767, 512) == 32_767 * 512 * 4  # the centroids
    assert budget_module.quantizer_bytes(32_768, 512) > 32_768 * 512 * 4  # and the graph's links


def test_many_lists_build_an_hnsw_coarse_quantiser_that_keeps_recall(tmp_path: Path, monkeypatch):
    import faiss

    monkeypatch.setattr(budget_module, "HNSW_QUANTIZER_FROM", 32)  # the graph at a test's size
    vectors = _clustered(3000, dim=32, clusters=40)
    _embed_folder(tmp_path, vectors)
    shards = EmbeddingShards(tmp_path / "embed" / EMBEDDINGS)
    config = MineConfig(index="ivf", k=8, ivf_lists=40, recall_sample=200)
    plan = plan_index(config, len(shards), shards.dim)
    assert plan.factory == "IVF40_HNSW32,Flat"
    searcher = ann.build_index(plan, shards, config, knn.torch.device("cpu"))
    quantizer = faiss.downcast_index(faiss.extract_index_ivf(searcher.index).quantizer)
    assert isinstance(quantizer, faiss.IndexHNSWFlat) and quantizer.ntotal == 40
    record = ann.tune(searcher, "ivf", shards, config)
    assert record["recall_at_k"] >= 0.95 and record["ivf_lists"] == 40


def test_recall_on_held_out_queries_uses_their_exact_top_k_over_the_whole_base(tmp_path: Path):
    vectors = _clustered(1000, dim=16)
    _embed_folder(tmp_path, vectors)
    shards = EmbeddingShards(tmp_path / "embed" / EMBEDDINGS)
    held_out = _clustered(50, dim=16, seed=9)
    truth = ann.exact_top_k(shards, None, 8, block=128, queries=held_out)  # streamed in blocks of the base
    expected = np.argsort(-(held_out @ vectors.T), axis=1, kind="stable")[:, :8]
    assert (np.sort(truth, axis=1) == np.sort(expected, axis=1)).all()
    exact = knn.FaissSearch.flat(16)
    exact.add(vectors)
    assert ann.holdout_recall(exact, shards, held_out, 8) == 1.0
    coarse = knn.FaissSearch(_ivf(vectors, 10))
    assert ann.holdout_recall(coarse, shards, held_out, 8) < 1.0


def test_a_compressed_index_searches_list_by_list_and_finds_what_row_order_finds(tmp_path: Path):
    from csts_pipeline.stages.mine import search

    _embed_folder(tmp_path, _clustered(2000, dim=32, clusters=40))
    shards = EmbeddingShards(tmp_path / "embed" / EMBEDDINGS)
    config = MineConfig(index="ivf_pq", k=8, rerank=8, ivf_lists=20, recall_sample=200)
    plan = plan_index(config, len(shards), shards.dim)
    searcher = ann.build_index(plan, shards, config, knn.torch.device("cpu"), tmp_path / "knn")
    ann.tune(searcher, plan.kind, shards, config)
    order = ann.rows_by_list(searcher.index)
    assert sorted(order.tolist()) == list(range(2000))  # every row once
    _, lists = searcher.index.quantizer.search(shards.rows(order), 1)
    assert (np.diff(lists[:, 0]) >= 0).all()  # grouped by list, lists in their order
    by_list = search.search_all(searcher, shards, k=8, batch=300, folder=tmp_path / "listed")
    by_row = search.store_knn(search.local_blocks(searcher, shards, 8, 300), 2000, 8, 300, tmp_path / "rows")
    assert (np.asarray(by_list[0]) == np.asarray(by_row[0])).all()
    assert np.allclose(by_list[1], by_row[1])
    keys = [int(line.split()[0]) for line in (tmp_path / "listed" / search.BLOCKS_DONE).read_text().splitlines()]
    assert keys == list(range(0, 2000, 300))


def _ivf(vectors: np.ndarray, lists: int):
    """IVF-Flat at nprobe 1: approximate, so held-out recall below 1."""
    import faiss

    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(vectors.shape[1]), vectors.shape[1], lists, faiss.METRIC_INNER_PRODUCT)
    index.train(vectors)
    index.add(vectors)
    return index


def test_a_budget_too_small_is_a_one_line_error():
    with pytest.raises(UserError, match=r"memory_budget=0\.5 GiB is too small for 10,000,000 images"):
        plan_index(MineConfig(memory_budget=0.5), 10_000_000, 512)
    with pytest.raises(UserError, match="ivf"):
        plan_index(MineConfig(memory_budget=1, index="ivf"), 1_000_000, 512)


@pytest.mark.parametrize("map_below", [0.0, 1.1])  # every read through a map; every read by preadv
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_rerank_is_exact_on_the_candidates(tmp_path: Path, dtype: type, map_below: float, monkeypatch):
    monkeypatch.setattr(rerank_module, "MAP_BELOW", map_below)
    monkeypatch.setattr(rerank_module, "RERANK_PAIRS", 100)  # parts of 3 queries
    monkeypatch.setattr(rerank_module, "READ_ROWS", 7)  # reads of 7 distinct rows
    rng = np.random.default_rng(3)
    base = rng.standard_normal((500, 24)).astype(np.float32)
    queries = rng.standard_normal((40, 24)).astype(np.float32)
    copy = VectorFile(tmp_path / "vectors.npy", 500, 24, dtype)
    for lo in range(0, 500, 128):  # written in blocks, as shards are
        copy.add(base[lo : lo + 128])
    copy.close()
    found = np.stack([rng.choice(500, 30, replace=False) for _ in queries])
    found[0, 5:] = -1  # fewer candidates than k: the rest stays missing
    scores, ids = rerank(queries, found, tmp_path / "vectors.npy", 10)
    stored = base.astype(dtype).astype(np.float32)
    for q in range(1, len(queries)):
        exact = stored[found[q]] @ queries[q]
        best = found[q][np.argsort(-exact, kind="stable")[:10]]
        assert ids[q].tolist() == best.tolist()
        np.testing.assert_allclose(scores[q], np.sort(exact)[::-1][:10], rtol=1e-5)
    assert (ids[0, 5:] == -1).all() and np.isneginf(scores[0, 5:]).all()
    assert set(ids[0, :5]) == set(found[0, :5])


@pytest.mark.parametrize("rows", [1, 7, 5000, 1_000_003])
def test_pairs_are_ordered_by_row_as_a_stable_argsort_orders_them(rows: int):
    rng = np.random.default_rng(rows)
    flat = rng.integers(-1, rows, 20_000)  # -1: no candidate, left out
    flat[:50] = rows - 1  # one row many times, at the top of the range
    valid = flat >= 0
    expected = np.argsort(np.where(valid, flat, np.iinfo(np.int64).max), kind="stable")[: valid.sum()]
    assert (rerank_module.pairs_by_row(flat) == expected).all()
    assert len(rerank_module.pairs_by_row(np.full(9, -1))) == 0


def test_float16_rows_widen_exactly_zeros_and_subnormals_included(tmp_path: Path):
    """The kernel widens float16 bits itself: every kind of value (zeros of both signs, subnormals, normals up to
    the largest) gives the product numpy gives from the same float16 values."""
    values = np.array([0.0, -0.0, 6e-8, -3e-6, 6.1e-5, 1e-5, 0.5, -0.25, 1.0, 65504.0, -2.5, 3e-4], np.float16)
    rows = np.stack([np.roll(values, shift) for shift in range(len(values))])  # each value in each column
    copy = VectorFile(tmp_path / "vectors.npy", len(rows), len(values), np.float16)
    copy.add(rows)
    copy.close()
    queries = np.eye(len(values), dtype=np.float32)  # query j reads column j of its candidates
    found = np.tile(np.arange(len(rows)), (len(values), 1))
    with StoredRows(tmp_path / "vectors.npy") as stored:
        exact = rerank_module.candidate_scores(queries, found, stored)
    np.testing.assert_array_equal(exact, rows.astype(np.float32).T)


def test_stored_rows_reads_runs_of_rows_and_names_a_truncated_file(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(rerank_module, "MAP_BELOW", 1.1)
    base = np.arange(100 * 4, dtype=np.float32).reshape(100, 4)
    copy = VectorFile(tmp_path / "vectors.npy", 100, 4, np.float16)
    copy.add(base)
    copy.close()
    wanted = np.array([0, 1, 2, 7, 50, 51, 99])  # runs of 3, 1, 2 and 1 rows
    with StoredRows(tmp_path / "vectors.npy") as stored:
        np.testing.assert_array_equal(stored.read(wanted), base[wanted].astype(np.float16).astype(np.float32))
    with open(tmp_path / "vectors.npy", "r+b") as handle:
        handle.truncate(handle.seek(0, 2) - 8)
    with StoredRows(tmp_path / "vectors.npy") as stored, pytest.raises(OSError, match="short read at row 99"):
        stored.read(wanted)


def test_compressed_mine_re_ranks_and_records_the_budget(tmp_path: Path):
    vectors = _clustered(3000, dim=32, clusters=40)
    config = {"index": "ivf_pq", "k": 8, "recall_sample": 200, "query_batch": 700, "rerank": 8}
    record, folder = _mine(tmp_path, vectors, **config)
    search = record["search"]
    assert search["index"] == "ivf_pq" and search["recall_at_k"] >= 0.95
    budget = search["budget"]
    assert budget["chosen"] == "ivf_pq" and budget["factory"].endswith("x4fsr") and budget["rerank_candidates"] == 64
    assert budget["measured_peak_gib"] > 0 and budget["estimated_gib"]["total"] <= budget["memory_budget_gib"]
    assert record["params"]["factory"] == budget["factory"]
    pairs = read_shards(folder / "image_pairs")
    ids = (np.arange(3000) * 7919) % 100_003
    row = {image: r for r, image in enumerate(ids)}
    first = np.array([row[i] for i in pairs.column("image_id_1").to_numpy()])
    second = np.array([row[i] for i in pairs.column("image_id_2").to_numpy()])
    exact = np.einsum("ij,ij->i", vectors[first], vectors[second])  # re-ranked: cosines are the exact ones
    np.testing.assert_allclose(pairs.column("cosine").to_numpy(), exact, atol=1e-5)


def test_re_ranking_lifts_recall_over_the_compressed_index_alone(tmp_path: Path):
    vectors = _clustered(3000, dim=32, clusters=40)
    _embed_folder(tmp_path, vectors)
    shards = EmbeddingShards(tmp_path / "embed" / EMBEDDINGS)
    config = MineConfig(index="ivf_pq", k=8, rerank=8)
    plan = plan_index(config, len(shards), shards.dim)
    searcher = ann.build_index(plan, shards, config, knn.torch.device("cpu"), tmp_path / "_knn")
    ann._set_parameter(searcher, "ivf_pq", 8)
    rows = np.arange(0, 3000, 10)
    truth = ann.exact_top_k(shards, rows, 8)
    queries = vectors[rows]
    plain = knn.drop_self(*searcher.index.search(queries, 9)[::-1], rows, 8)[0]
    reranked = knn.drop_self(*searcher.search(queries, 9)[::-1], rows, 8)[0]
    assert ann.recall_at_k(reranked, truth) > ann.recall_at_k(plain, truth) + 0.1


def test_exact_torch_mine_over_float16_shards_gives_the_faiss_pairs(tmp_path: Path):
    """float16 shards reach the torch search as stored (it widens them itself): the same image pairs as FAISS's
    exact search over the shards read as float32."""
    vectors = _clustered(700, dim=32)
    _embed_folder(tmp_path / "work", vectors, dtype="float16")
    assert EmbeddingShards(tmp_path / "work" / "embed" / EMBEDDINGS).dtype == np.float16
    tables = {}
    for backend in ("faiss", "torch"):
        _, folder = _mine(tmp_path, vectors, index="exact", k=8, knn=backend)
        tables[backend] = read_shards(folder / "image_pairs")
    assert tables["torch"].num_rows == tables["faiss"].num_rows > 0
    for column in ("image_id_1", "image_id_2"):
        assert tables["torch"].column(column).to_pylist() == tables["faiss"].column(column).to_pylist()


def test_float16_embeddings_round_trip_and_mine_the_same_neighbours(tmp_path: Path):
    vectors = _clustered(600, dim=32)
    table = embeddings_table(np.arange(600), [""] * 600, vectors, "float16")
    assert table.schema.field("embedding").type.value_type == pa.float16()
    write_table(table, tmp_path / "half" / "part-00000.parquet")
    shards = EmbeddingShards(tmp_path / "half")
    assert shards.dtype == np.float16 and shards.dim == 32
    read = next(shards.shards())
    assert read.dtype == np.float32
    np.testing.assert_array_equal(read, vectors.astype(np.float16).astype(np.float32))
    assert next(shards.shards(np.float16)).dtype == np.float16
    half, _ = knn.exact_knn(read, 8)
    full, _ = knn.exact_knn(vectors, 8)
    assert ann.recall_at_k(half, full) > 0.98


def _mapped_kib(path: Path) -> int:
    """How much of `path` this process holds through its memory maps (Rss in /proc/self/smaps), in KiB."""
    held, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if "-" in line.split(" ", 1)[0] and len(line.split()) >= 5:  # a mapping's header line
            inside = line.endswith(str(path))
        elif inside and line.startswith("Rss:"):
            held += int(line.split()[1])
    return held


@pytest.mark.skipif(not Path("/proc/self/smaps").is_file(), reason="reads Linux's /proc/self/smaps")
def test_the_pairs_give_back_the_pages_of_the_neighbour_lists(tmp_path: Path):
    from csts_pipeline.stages.mine.pairs import CaptionIndex
    from csts_pipeline.stages.mine.search import write_pairs
    from csts_pipeline.stages.mine.vectors import release_pages

    n, k = 20_000, 16
    rng = np.random.default_rng(0)
    np.save(tmp_path / "neighbours.npy", rng.integers(0, n, (n, k), dtype=np.int32))
    np.save(tmp_path / "scores.npy", rng.random((n, k), dtype=np.float32))
    neighbours = np.load(tmp_path / "neighbours.npy", mmap_mode="r")
    scores = np.load(tmp_path / "scores.npy", mmap_mode="r")
    assert int(np.asarray(neighbours).sum()) > 0 and _mapped_kib(tmp_path / "neighbours.npy") >= n * k * 4 // 1024
    release_pages(neighbours)
    assert _mapped_kib(tmp_path / "neighbours.npy") == 0

    ids = np.arange(n, dtype=np.int64)
    captions = CaptionIndex.build(ids, ids, ids)
    config = MineConfig(k=k, query_batch=5000)
    units, pairs = write_pairs(
        neighbours, scores, image_ids=ids, captions=captions, config=config, staging=tmp_path / "staging"
    )
    assert pairs > 0 and len(units) >= 4  # every list was read, and none of it is held now
    assert _mapped_kib(tmp_path / "neighbours.npy") == 0 and _mapped_kib(tmp_path / "scores.npy") == 0


@pytest.mark.skipif(not Path("/proc/self/smaps").is_file(), reason="reads Linux's /proc/self/smaps")
def test_the_reverse_look_ups_give_back_each_chunks_pages(tmp_path: Path):
    from csts_pipeline.stages.mine.pairs import reverse_rank

    n, k = 20_000, 16
    np.save(tmp_path / "neighbours.npy", np.random.default_rng(1).integers(0, n, (n, k), dtype=np.int32))
    neighbours = np.load(tmp_path / "neighbours.npy", mmap_mode="r")
    query = np.arange(n, dtype=np.int64).repeat(k)
    back = reverse_rank(query, np.asarray(neighbours).reshape(-1).astype(np.int64), neighbours, chunk=4096)
    assert (back > 0).any() and _mapped_kib(tmp_path / "neighbours.npy") == 0  # not one chunk's pages held
