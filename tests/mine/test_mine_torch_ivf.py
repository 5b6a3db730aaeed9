"""The torch IVF (what a GPU without FAISS's GPU build searches with), run on the CPU device: its top-k is FAISS
IVF-Flat's at the same nprobe whatever the query grouping, recall on held-out queries rises to the target, the
memory budget chooses it by the device's memory, and mine runs through it end to end."""

from pathlib import Path

import numpy as np
import pytest
import torch

from csts_pipeline.pipeline.manifest import MineConfig
from csts_pipeline.pipeline.shards import read_shards
from csts_pipeline.stages.mine import ann
from csts_pipeline.stages.mine import stage as mine_stage
from csts_pipeline.stages.mine.budget import GIB, Accelerator, find_accelerator, plan_index
from csts_pipeline.stages.mine.knn import TorchSearch
from csts_pipeline.stages.mine.torch_ivf import TorchIVF, list_rows, query_groups
from tests.mine.test_mine_ann import _clustered, _mine

CPU = torch.device("cpu")


def _mixture(n: int, dim: int = 32, seed: int = 0, noise: float = 1.2) -> np.ndarray:
    """Overlapping clusters: a query's neighbours spread over several lists, so nprobe matters."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).standard_normal((60, dim)).astype(np.float32)
    vectors = centres[rng.integers(0, 60, n)] + noise * rng.standard_normal((n, dim)).astype(np.float32)
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def _ivf(base: np.ndarray, lists: int, piece: int = 700) -> TorchIVF:
    ivf = TorchIVF(base.shape[1], lists, CPU, seed=3)
    ivf.train(base[np.random.default_rng(1).choice(len(base), min(len(base), lists * 39), replace=False)])
    for lo in range(0, len(base), piece):
        ivf.add(base[lo : lo + piece])
    return ivf


def _reference(ivf: TorchIVF, base: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """FAISS IVF-Flat's answer, one query at a time: the exact top-k among the rows of its nprobe nearest lists."""
    centroids = ivf.centroids.numpy()
    assign = (base @ centroids.T).argmax(axis=1)
    out = np.full((len(queries), k), -1)
    for i, query in enumerate(queries):
        probed = np.argsort(-(centroids @ query), kind="stable")[: ivf.nprobe]
        rows = np.flatnonzero(np.isin(assign, probed))
        best = rows[np.argsort(-(base[rows] @ query), kind="stable")[:k]]
        out[i, : len(best)] = best
    return out


@pytest.mark.parametrize("nprobe", [1, 3, 8])
def test_the_top_k_is_ivf_flats_at_that_nprobe_whatever_the_grouping(nprobe: int):
    base, queries = _mixture(3000), _mixture(200, seed=5)
    ivf = _ivf(base, lists=24)
    ivf.set_parameter("nprobe", nprobe)
    scores, found = ivf.search(queries, 10)
    assert (found == _reference(ivf, base, queries, 10)).mean() > 0.999  # a float32 near-tie may swap two
    assert np.all(np.diff(scores, axis=1) <= 1e-6)  # best first
    # the same queries fed in list order (mine's order: whole lists in one product) give the same answer
    by_list = ivf.rows_by_list()[:500]
    _, listed = ivf.search(base[by_list], 10)
    _, scattered = ivf.search(base[np.sort(by_list)], 10)
    order = np.argsort(by_list)
    assert np.array_equal(listed[order], scattered)


def test_too_few_probed_rows_are_padded_and_read_returns_the_stored_rows():
    base = _clustered(400, dim=8, clusters=8)
    ivf = _ivf(base, lists=40, piece=150)
    scores, found = ivf.search(base[:5], 60)  # one list of about 10 rows: fewer than k
    assert (found == -1).any() and np.all(np.isneginf(scores[found == -1]))
    assert np.all(found[found >= 0] < 400)
    rows = np.array([399, 0, 17])
    np.testing.assert_array_equal(ivf.read(rows), base[rows])
    assert sorted(ivf.rows_by_list()) == list(range(400))
    with pytest.raises(ValueError, match="add after search"):  # the sorted base would lose the rows before
        ivf.add(base[:3])


def test_recall_on_held_out_queries_rises_with_nprobe_to_the_target():
    """Held-out queries (never added) from the same distribution: recall@k against the exact top-k reaches 0.95
    before every list is probed, and 1 when all are."""
    base, held_out, k = _mixture(6000), _mixture(300, seed=11), 16
    ivf = _ivf(base, lists=64)
    exact = TorchSearch(base.shape[1])
    exact.add(base)
    truth = exact.search(held_out, k)[1]
    recalls = {}
    for nprobe in (1, 2, 4, 8, 16, 32, 64):
        ivf.set_parameter("nprobe", nprobe)
        recalls[nprobe] = ann.recall_at_k(ivf.search(held_out, k)[1], truth)
    assert recalls[1] < 0.8  # a hard enough set: one list is not enough
    assert all(recalls[a] <= recalls[b] + 1e-9 for a, b in zip(list(recalls), list(recalls)[1:]))
    assert min(p for p, r in recalls.items() if r >= 0.95) < 64
    assert recalls[64] == 1.0
    np.testing.assert_array_equal(ivf.exact_search(held_out, k)[1], truth)


def test_query_groups_keep_lists_whole_and_pack_scattered_queries():
    nearest = np.array([5, 1, 5, 5, 2, 9, 1, 7])
    groups = query_groups(nearest, pack=3)
    assert sorted(np.concatenate(groups).tolist()) == list(range(8))
    assert [nearest[group].tolist() for group in groups] == [[1, 1, 2], [5, 5, 5], [7, 9]]
    rows, owner = list_rows(torch.tensor([0, 3, 3, 7, 9]), torch.tensor([0, 2, 3]))
    assert rows.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8] and owner.tolist() == [0, 0, 0, 1, 1, 1, 1, 2, 2]


def test_the_budget_puts_the_ivf_on_the_gpu_when_the_device_memory_holds_it():
    config = MineConfig(memory_budget=8)
    h100 = Accelerator(int(72 * GIB), "torch", itemsize=2)
    plan = plan_index(config, 10_000_000, 512, accelerator=h100)
    assert (plan.kind, plan.backend) == ("ivf", "torch")
    assert plan.estimate["total"] <= 8 * GIB  # the host holds a piece in transit and the row order
    assert 20 * GIB < plan.gpu_estimate["total"] <= 72 * GIB  # base twice while sorting, in float16
    record = plan.record(8)
    assert record["backend"] == "torch" and record["estimated_gpu_gib"]["total"] > 20
    small = plan_index(config, 10_000_000, 512, accelerator=Accelerator(int(16 * GIB), "torch", itemsize=2))
    assert (small.kind, small.backend) == ("ivf_pq", "faiss") and "on the GPU, torch" in small.reason
    faiss_gpu = plan_index(config, 10_000_000, 512, accelerator=Accelerator(int(72 * GIB), "faiss-gpu"))
    assert faiss_gpu.backend == "faiss-gpu"
    assert plan_index(config, 100_000, 512, accelerator=h100).kind == "exact"  # below exact_below
    assert plan_index(config, 1_000_000, 512).backend == "faiss"  # no device: FAISS on the host
    assert find_accelerator(config, "cpu") is None


def test_mine_runs_through_the_torch_ivf_and_records_it(tmp_path: Path, monkeypatch):
    """The stage with an accelerator that says torch (on this CPU device): the torch IVF is built, tuned to the
    target on the sample, searched list by list, and the record and the fingerprint name it."""
    monkeypatch.setattr(
        mine_stage, "find_accelerator", lambda config, device, itemsize=4: Accelerator(int(8 * GIB), "torch", itemsize)
    )
    vectors = _mixture(2500, dim=16, noise=0.8)
    record, folder = _mine(tmp_path, vectors, index="ivf", k=8, recall_sample=200, query_batch=256, ivf_lists=30)
    search = record["search"]
    assert search["ivf_backend"] == "torch" and record["knn_backend"] == "torch"
    assert search["recall_at_k"] >= 0.95 and search["nprobe"] < 30
    assert record["params"]["ivf_backend"] == "torch"
    pairs = read_shards(folder / "image_pairs")
    assert pairs.num_rows > 2500 * 8 / 2


def test_candidates_scored_in_chunks_give_the_same_top_k(monkeypatch):
    """A group whose scores (or gathered vectors) pass SCORE_BYTES goes in chunks of candidates, merged by score."""
    from csts_pipeline.stages.mine import torch_ivf

    base, queries = _mixture(3000), _mixture(150, seed=7)
    ivf = _ivf(base, lists=24)
    ivf.set_parameter("nprobe", 6)
    whole = ivf.search(queries, 10)
    monkeypatch.setattr(torch_ivf, "SCORE_BYTES", 64 * 32 * 4 * 5)  # about 160 rows a chunk
    chunked = ivf.search(queries, 10)
    np.testing.assert_array_equal(chunked[1], whole[1])
    np.testing.assert_allclose(chunked[0], whole[0], rtol=1e-6)
